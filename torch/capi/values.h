// values.h turns a call's pre-order input nodes into IValues (Builder) and an output IValue
// into a td_result (Flattener), for modules, packages and explanations alike.

#ifndef TORCHD_CAPI_VALUES_H
#define TORCHD_CAPI_VALUES_H

#include "internal.h"

namespace td {

// noop_deleter is the deleter of a tensor over caller memory, which the caller owns.
inline void noop_deleter(void *) {}

// Span is the memory of one input tensor built over caller memory.
struct Span {
  const char *begin, *end;
};

// Builder turns the pre-order input nodes into IValues.
struct Builder {
  const td_node *nodes;
  int n;
  int pos = 0;
  c10::Device device;
  std::vector<Span> borrowed;

  const td_node &next() {
    if (pos >= n) throw std::invalid_argument("malformed input tree: ran out of nodes");
    return nodes[pos++];
  }

  at::Tensor tensor(const td_node &nd) {
    if (nd.tensor != nullptr) {
      return nd.tensor->t.device() == device ? nd.tensor->t : nd.tensor->t.to(device);
    }
    if (nd.ndim < 0 || (nd.ndim > 0 && nd.shape == nullptr)) {
      throw std::invalid_argument("malformed tensor input: bad shape");
    }
    std::vector<int64_t> shape(nd.shape, nd.shape + nd.ndim);
    auto opts = at::TensorOptions().dtype(to_scalar_type(nd.dtype)).device(c10::kCPU);
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    at::Tensor t;
    if (numel == 0 || nd.data == nullptr) {
      t = at::empty(shape, opts);
    } else {
      t = torch::from_blob(nd.data, shape, noop_deleter, opts);
      const char *p = static_cast<const char *>(nd.data);
      borrowed.push_back({p, p + t.nbytes()});
    }
    if (device.is_cpu()) return t;
    // From pinned memory (td_host_buffer) the copy is queued on the device's stream and the
    // call waits for it at its end (finish); from pageable memory it is synchronous.
    bool pinned = nd.data != nullptr && t.is_pinned();
    return t.to(device, /*non_blocking=*/pinned);
  }

  // finish waits, on a GPU, for the call's work on its worker stream: the input copies queued
  // from pinned memory, whose source the caller may overwrite once the call returns, and the
  // forward, whose outputs are read later from another stream.
  void finish() const {
    if (!device.is_cpu()) c10::impl::VirtualGuardImpl(device.type()).getStream(device).synchronize();
  }

  c10::IValue value() {
    const td_node &nd = next();
    switch (nd.kind) {
      case TD_NONE:
        return c10::IValue();
      case TD_BOOL:
        return c10::IValue(nd.i != 0);
      case TD_INT:
        return c10::IValue(nd.i);
      case TD_DOUBLE:
        return c10::IValue(nd.d);
      case TD_STRING:
        return c10::IValue(std::string(nd.str, static_cast<size_t>(nd.str_len)));
      case TD_TENSOR:
        return c10::IValue(tensor(nd));
      case TD_TUPLE: {
        std::vector<c10::IValue> items;
        items.reserve(nd.n_children);
        for (int k = 0; k < nd.n_children; k++) items.push_back(value());
        return c10::ivalue::Tuple::create(std::move(items));
      }
      case TD_LIST:
        return list(nd.n_children);
      case TD_DICT:
        return dict(nd.n_children);
    }
    throw std::invalid_argument("malformed input tree: unknown kind " + std::to_string(nd.kind));
  }

  // list builds a typed list: TorchScript checks List[T] arguments by their element type,
  // so a list of tensors must be a c10::List<Tensor>, not a generic one.
  c10::IValue list(int count) {
    std::vector<c10::IValue> items;
    items.reserve(count);
    for (int k = 0; k < count; k++) items.push_back(value());
    c10::TypePtr elem = items.empty() ? c10::TensorType::get() : unify(items);
    c10::impl::GenericList out(elem);
    out.reserve(items.size());
    for (auto &it : items) out.push_back(std::move(it));
    return c10::IValue(std::move(out));
  }

  c10::IValue dict(int count) {
    if (count % 2 != 0) throw std::invalid_argument("malformed input tree: odd dict children");
    std::vector<c10::IValue> keys, vals;
    for (int k = 0; k < count / 2; k++) {
      keys.push_back(value());
      vals.push_back(value());
    }
    c10::TypePtr kt = keys.empty() ? c10::StringType::get() : unify(keys);
    c10::TypePtr vt = vals.empty() ? c10::TensorType::get() : unify(vals);
    c10::impl::GenericDict out(kt, vt);
    for (size_t k = 0; k < keys.size(); k++) out.insert_or_assign(keys[k], vals[k]);
    return c10::IValue(std::move(out));
  }

  // unify finds the element type of a list or dict. A tensor's IValue type is refined with
  // its dtype and shape, but containers are invariant in TorchScript, so List[Tensor]
  // needs the plain Tensor type.
  static c10::TypePtr unify(const std::vector<c10::IValue> &items) {
    auto general = [](c10::TypePtr t) -> c10::TypePtr {
      return t->kind() == c10::TypeKind::TensorType ? c10::TensorType::get() : t;
    };
    c10::TypePtr t = general(items[0].type());
    for (size_t k = 1; k < items.size(); k++) {
      auto u = c10::unifyTypes(t, general(items[k].type()));
      if (!u) {
        throw std::invalid_argument("list or dict mixes element types " + t->repr_str() +
                                    " and " + items[k].type()->repr_str());
      }
      t = *u;
    }
    return t;
  }
};

// Flattener writes an output IValue into a td_result in pre-order.
struct Flattener {
  td_result *r;
  const std::vector<Span> &borrowed;

  bool aliases_input(const at::Tensor &t) const {
    if (!t.has_storage() || !t.device().is_cpu()) return false;
    const char *p = static_cast<const char *>(t.storage().data());
    for (const auto &s : borrowed) {
      if (p >= s.begin && p < s.end) return true;
    }
    return false;
  }

  void value(const c10::IValue &v) {
    td_node nd{};
    if (v.isNone()) {
      nd.kind = TD_NONE;
      r->nodes.push_back(nd);
    } else if (v.isBool()) {
      nd.kind = TD_BOOL;
      nd.i = v.toBool() ? 1 : 0;
      r->nodes.push_back(nd);
    } else if (v.isInt()) {
      nd.kind = TD_INT;
      nd.i = v.toInt();
      r->nodes.push_back(nd);
    } else if (v.isDouble()) {
      nd.kind = TD_DOUBLE;
      nd.d = v.toDouble();
      r->nodes.push_back(nd);
    } else if (v.isString()) {
      r->strings.push_back(v.toStringRef());
      nd.kind = TD_STRING;
      nd.str = r->strings.back().data();
      nd.str_len = static_cast<int64_t>(r->strings.back().size());
      r->nodes.push_back(nd);
    } else if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (v.isTuple()) {
      const auto &elems = v.toTupleRef().elements();
      nd.kind = TD_TUPLE;
      nd.n_children = static_cast<int32_t>(elems.size());
      r->nodes.push_back(nd);
      for (const auto &e : elems) value(e);
    } else if (v.isList()) {
      auto l = v.toListRef();
      nd.kind = TD_LIST;
      nd.n_children = static_cast<int32_t>(l.size());
      r->nodes.push_back(nd);
      for (const auto &e : l) value(e);
    } else if (v.isGenericDict()) {
      auto d = v.toGenericDict();
      nd.kind = TD_DICT;
      nd.n_children = static_cast<int32_t>(2 * d.size());
      r->nodes.push_back(nd);
      for (const auto &e : d) {
        value(e.key());
        value(e.value());
      }
    } else {
      throw std::invalid_argument("unsupported output type " + v.type()->repr_str());
    }
  }

  void tensor(at::Tensor t) {
    // A storage inside the caller's input memory, which is unpinned once the call
    // returns: copy it out.
    if (aliases_input(t)) t = t.clone();
    if (t.device().is_cpu() && !t.is_contiguous()) t = t.contiguous();
    td_node nd{};
    nd.kind = TD_TENSOR;
    nd.dtype = from_scalar_type(t.scalar_type());
    nd.ndim = static_cast<int32_t>(t.dim());
    r->shapes.emplace_back(t.sizes().begin(), t.sizes().end());
    nd.shape = r->shapes.back().data();
    nd.data = t.device().is_cpu() ? t.data_ptr() : nullptr;
    nd.tensor = new td_tensor{std::move(t)};
    r->nodes.push_back(nd);
  }
};

}  // namespace td

#endif  // TORCHD_CAPI_VALUES_H
