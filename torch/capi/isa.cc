// isa.cc: an AOTInductor package's compiled code checked against this host's CPU features.

#include "internal.h"

#include <fstream>
#include <sstream>

namespace td {

namespace {

// cpu_flags reads the x86 feature flags of the first processor in /proc/cpuinfo.
std::set<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

// The /proc/cpuinfo flags that code compiled for each AOTI_CPU_ISA, and for each
// torchd.march, needs. The ISA lists follow inductor's cpu_vec_isa.py arch flags; x86-64-v3
// and v4 are the psABI levels.
const std::map<std::string, std::vector<std::string>> kISAFlags = {
    {"AVX2", {"avx2", "fma"}},
    {"AVX512", {"avx512f", "avx512dq", "avx512vl", "avx512bw", "fma"}},
    {"AMX", {"avx512f", "avx512dq", "avx512vl", "avx512bw", "avx512_vnni", "amx_tile", "amx_bf16",
             "amx_int8"}},
    // Extensions inductor adds to AOTI_CPU_ISA after the base ISA, e.g. "AVX512 AVX512_VNNI".
    {"AVX512_VNNI", {"avx512_vnni"}},
    {"AVX512_BF16", {"avx512_bf16"}},
    {"AVX512_FP16", {"avx512_fp16"}},
    {"AVX_VNNI", {"avx_vnni"}},
    {"AMX_FP16", {"amx_fp16"}},
    {"x86-64-v2", {"sse4_2", "popcnt", "ssse3"}},
    {"x86-64-v3", {"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"}},
    {"x86-64-v4", {"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm", "avx512f", "avx512bw",
                   "avx512cd", "avx512dq", "avx512vl"}},
};

}  // namespace

// check_cpu refuses a package whose compiled code needs CPU features this host lacks: such
// code dies with SIGILL at its first vector instruction, so the check runs before the
// package's library is loaded. A package compiled with -march=native records only its vector
// ISA (AOTI_CPU_ISA); torchd's own packages also record their -march (torchd.march).
void check_cpu(const std::map<std::string, std::string> &md) {
  std::set<std::string> have = cpu_flags();
  if (have.empty()) return;  // not x86 Linux: nothing to compare against
  for (const char *key : {"AOTI_CPU_ISA", "torchd.march"}) {
    auto it = md.find(key);
    if (it == md.end() || it->second.empty()) continue;
    // AOTI_CPU_ISA may list several: the base ISA, then its extensions.
    std::istringstream words(it->second);
    for (std::string isa; words >> isa;) {
      auto req = kISAFlags.find(isa);
      if (req == kISAFlags.end()) {
        if (std::string(key) == "AOTI_CPU_ISA" && isa != "INVALID_VEC_ISA") {
          throw std::runtime_error("package compiled for CPU capability " + it->second +
                                   ", which torchd does not know how to check on this host");
        }
        continue;
      }
      std::string missing;
      for (const auto &f : req->second) {
        if (!have.count(f)) missing += (missing.empty() ? "" : " ") + f;
      }
      if (!missing.empty()) {
        throw std::runtime_error("package compiled for CPU capability " + it->second + " (" +
                                 key + "), but this CPU lacks " + missing +
                                 "; compile it for this host or a baseline it has "
                                 "(torch._inductor.config.cpp.march, cpp.simdlen)");
      }
    }
  }
}

}  // namespace td
