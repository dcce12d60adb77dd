// torchd's web page: the models, a form per handler to try one, and the live view.
// Plain JavaScript, no dependencies. Everything it shows comes from the inference port:
// /ui/api/models, /ui/api/stats, /ping and the prediction routes. Management actions go to
// the management port, and are shown only when it answers this page (CORS) and accepts its
// key. Nodes are built with the DOM, never from HTML strings, so labels and captions from
// the server are text.
"use strict";

const $ = (sel) => document.querySelector(sel);
const keyStore = {
  get: (kind) => sessionStorage.getItem("torchd." + kind + "Key") || "",
  set: (kind, v) => v ? sessionStorage.setItem("torchd." + kind + "Key", v) : sessionStorage.removeItem("torchd." + kind + "Key"),
};

const state = {
  info: null,          // the last /ui/api/models answer
  models: [],          // its models
  selected: "",        // "name/version" in the try form
  management: "",      // the management API's base URL once a probe succeeded
  needKey: false,
};

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// api calls the inference port with the inference key, if one is set.
async function api(path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  const key = keyStore.get("inference");
  if (key) headers.set("Authorization", "Bearer " + key);
  const res = await fetch(path, { ...opts, headers });
  if (res.status === 400 && res.headers.get("Content-Type")?.startsWith("application/json")) {
    const body = await res.clone().json().catch(() => ({}));
    const msg = body.type || body.error || "";
    if (body.type === "InvalidKeyException" || String(msg).includes("Token Authorization")) {
      askForKeys(key ? "The inference key was refused." : "This server needs the inference key.");
    }
  }
  return res;
}

function askForKeys(why) {
  state.needKey = true;
  $("#keys").hidden = false;
  $("#keys-button").hidden = false;
  $("#keys-button").setAttribute("aria-expanded", "true");
  $("#server-status").textContent = why;
}

// --- the model list ------------------------------------------------------------------------

async function refreshModels() {
  let res;
  try {
    res = await api("/ui/api/models");
  } catch (e) {
    $("#server-status").textContent = "The server does not answer.";
    return;
  }
  if (!res.ok) return;
  const info = await res.json();
  state.needKey = false;
  state.info = info;
  state.models = info.models;
  if (info.tokenAuthorization) $("#keys-button").hidden = false;
  const ping = await fetch("/ping").then((r) => r.json()).catch(() => ({}));
  $("#server-status").textContent = `version ${info.version} · ${ping.status || "?"} · ${info.models.length} model version${info.models.length === 1 ? "" : "s"}`;
  renderModels();
  renderSelect();
  await probeManagement();
}

// renderModels redraws the table when what it shows changed, keeping the keyboard focus on
// the same button.
let shown = "";
function renderModels() {
  const sig = JSON.stringify([state.models, state.management]);
  if (sig === shown) return;
  shown = sig;
  const body = $("#models tbody");
  const focused = body.contains(document.activeElement) ? document.activeElement.getAttribute("aria-label") : null;
  body.replaceChildren();
  $("#no-models").hidden = state.models.length > 0;
  for (const m of state.models) {
    const id = `${m.name}/${m.version}`;
    const workers = Object.entries(m.workerStatus).map(([s, n]) => `${n} ${s.toLowerCase()}`).join(", ");
    const buttons = el("div", { class: "actions" });
    if (m.state !== "LOADING") {
      buttons.append(el("button", {
        type: "button", class: "small", text: "Try", "data-try": id,
        "aria-label": `Try ${m.name} ${m.version}`, onclick: () => { selectModel(id); $("#try-model").focus(); },
      }));
    }
    if (state.management && m.state !== "LOADING") {
      buttons.append(
        el("button", { type: "button", class: "small", text: "−", "aria-label": `One worker less for ${m.name} ${m.version}`, onclick: () => scale(m, m.minWorkers - 1), disabled: m.minWorkers <= 0 }),
        el("button", { type: "button", class: "small", text: "+", "aria-label": `One worker more for ${m.name} ${m.version}`, onclick: () => scale(m, m.minWorkers + 1) }),
        el("button", { type: "button", class: "small", text: "Unregister", "aria-label": `Unregister ${m.name} ${m.version}`, onclick: () => unregister(m) }),
      );
    }
    body.append(el("tr", { "data-model": id },
      el("th", { scope: "row", text: m.name }),
      el("td", { text: m.version + (m.default ? " (default)" : "") }),
      el("td", { text: m.handler || "—" }),
      el("td", { text: m.state === "LOADING" ? "—" : `${m.workers} of ${m.minWorkers}–${m.maxWorkers}` + (workers ? ` (${workers})` : "") }),
      el("td", { text: m.state === "LOADING" ? "—" : `up to ${m.batchSize}, ${m.maxBatchDelayMs} ms` }),
      el("td", { text: m.state === "LOADING" ? "—" : `${m.queue} / ${m.queueCapacity}` }),
      el("td", {}, el("span", { class: "state state-" + m.state.replace(" ", "-"), text: m.state })),
      el("td", {}, buttons),
    ));
  }
  if (focused) {
    const again = [...body.querySelectorAll("button")].find((b) => b.getAttribute("aria-label") === focused);
    if (again) again.focus();
  }
}

function renderSelect() {
  const sel = $("#try-model");
  const usable = state.models.filter((m) => m.state !== "LOADING");
  const ids = usable.map((m) => `${m.name}/${m.version}`);
  const current = [...sel.options].map((o) => o.value);
  if (ids.join("\n") !== current.join("\n")) {
    sel.replaceChildren(...usable.map((m) => el("option", {
      value: `${m.name}/${m.version}`, text: `${m.name} ${m.version} — ${m.handler}`,
    })));
  }
  if (!ids.includes(state.selected)) {
    const def = usable.find((m) => m.default) || usable[0];
    selectModel(def ? `${def.name}/${def.version}` : "");
  } else {
    sel.value = state.selected;
  }
}

function selectedModel() {
  return state.models.find((m) => `${m.name}/${m.version}` === state.selected);
}

// selectModel shows the form of the model's handler.
function selectModel(id) {
  const changed = id !== state.selected;
  state.selected = id;
  $("#try-model").value = id;
  const m = selectedModel();
  const kind = !m ? "" : m.handler === "image_classifier" || m.handler === "image_captioner" ? "image"
    : m.handler === "text_classifier" ? "text" : "tensor";
  $("#form-image").hidden = kind !== "image";
  $("#form-text").hidden = kind !== "text";
  $("#form-tensor").hidden = kind !== "tensor";
  if (changed) {
    clearOutput();
    if (kind === "tensor") $("#tensor-input").value = exampleTensor(m);
  }
}

// exampleTensor is zeros of the model's declared input, variable dimensions as 1.
function exampleTensor(m) {
  const inp = m.inputs[0];
  if (!inp || !inp.shape) return "[[0, 0]]";
  const shape = inp.shape.map((d) => (d < 0 ? 1 : d));
  const n = shape.reduce((a, b) => a * b, 1);
  if (n > 100000) return JSON.stringify({ shape, dtype: inp.dtype, data: [] });
  return JSON.stringify({ shape, dtype: inp.dtype, data: new Array(n).fill(0) });
}

// --- trying a model ------------------------------------------------------------------------

function clearOutput() {
  const p = $("#preview");
  if (p.src) URL.revokeObjectURL(p.src);
  p.hidden = true;
  p.removeAttribute("src");
  $("#result").replaceChildren();
  $("#latency").textContent = "";
}

function predictPath(m) {
  return `/predictions/${encodeURIComponent(m.name)}/${encodeURIComponent(m.version)}`;
}

// predict sends body to the selected model and shows the answer and the round-trip latency.
async function predict(body, contentType) {
  const m = selectedModel();
  if (!m) return;
  const result = $("#result");
  result.replaceChildren(el("p", { text: "Running…" }));
  const t0 = performance.now();
  let res, text;
  try {
    res = await api(predictPath(m), { method: "POST", body, headers: { "Content-Type": contentType } });
    text = await res.text();
  } catch (e) {
    result.replaceChildren(el("p", { class: "error", role: "alert", text: "Request failed: " + e.message }));
    return;
  }
  const ms = performance.now() - t0;
  $("#latency").textContent = `${m.name} ${m.version}: HTTP ${res.status} in ${ms.toFixed(1)} ms (round trip from this browser)`;
  $("#latency").dataset.ms = ms.toFixed(1);
  let json = null;
  try { json = JSON.parse(text); } catch { /* .npy or text */ }
  if (!res.ok) {
    const msg = json ? (json.message || json.error || text) : text;
    result.replaceChildren(el("p", { class: "error", role: "alert", text: `${res.status}: ${msg}` }));
    return;
  }
  if (json === null) {
    result.replaceChildren(el("p", { text: `${text.length} bytes of ${res.headers.get("Content-Type") || "data"}` }));
    return;
  }
  if (m.handler === "image_classifier" || m.handler === "text_classifier") showTopK(json);
  else if (m.handler === "image_captioner") showCaption(json);
  else result.replaceChildren(el("pre", { id: "tensor-output", text: JSON.stringify(json, null, 1) }));
}

// showTopK draws {label: probability} as bars, most probable first. The order is the
// values': JSON objects with numeric keys come back from JSON.parse in key order.
function showTopK(json) {
  const probs = Array.isArray(json) ? json[0] : json;
  const entries = Object.entries(probs).sort((a, b) => b[1] - a[1]);
  const list = el("ol", { class: "topk", id: "topk", "aria-label": "Most probable labels" });
  entries.forEach(([label, p], i) => {
    const bar = el("span", { class: "bar", "aria-hidden": "true" }, el("span"));
    bar.firstChild.style.width = Math.max(0, Math.min(100, p * 100)).toFixed(1) + "%";
    list.append(el("li", { "data-rank": String(i + 1), "data-label": label },
      el("span", { class: "label", text: label }), bar,
      el("span", { class: "prob", text: (p * 100).toFixed(p >= 0.995 || p < 0.001 ? 2 : 1) + "%" })));
  });
  $("#result").replaceChildren(list);
}

function showCaption(json) {
  const c = Array.isArray(json) ? json[0].caption : json.caption;
  const fig = el("figure", {});
  fig.append(el("figcaption", { id: "caption", text: c }));
  $("#result").replaceChildren(fig);
}

function useFile(file) {
  if (!file) return;
  clearOutput();
  const p = $("#preview");
  p.src = URL.createObjectURL(file);
  p.alt = "The image sent: " + file.name;
  p.hidden = false;
  predict(file, file.type || "application/octet-stream");
}

function setUpForms() {
  $("#try-model").addEventListener("change", (e) => selectModel(e.target.value));
  $("#file-input").addEventListener("change", (e) => { useFile(e.target.files[0]); e.target.value = ""; });
  const drop = $("#drop");
  for (const ev of ["dragenter", "dragover"]) {
    drop.addEventListener(ev, (e) => { e.preventDefault(); drop.classList.add("over"); });
  }
  for (const ev of ["dragleave", "drop"]) drop.addEventListener(ev, () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); useFile(e.dataTransfer.files[0]); });
  $("#form-text").addEventListener("submit", (e) => {
    e.preventDefault();
    predict($("#text-input").value, "text/plain; charset=utf-8");
  });
  $("#form-tensor").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("#tensor-input").value;
    try { JSON.parse(text); } catch (err) {
      $("#result").replaceChildren(el("p", { class: "error", role: "alert", text: "Not JSON: " + err.message }));
      return;
    }
    predict(text, "application/json");
  });
  $("#keys-button").addEventListener("click", () => {
    const k = $("#keys");
    k.hidden = !k.hidden;
    $("#keys-button").setAttribute("aria-expanded", String(!k.hidden));
    if (!k.hidden) $("#inference-key").focus();
  });
  $("#keys-form").addEventListener("submit", (e) => {
    e.preventDefault();
    keyStore.set("inference", $("#inference-key").value.trim());
    keyStore.set("management", $("#management-key").value.trim());
    $("#keys").hidden = true;
    $("#keys-button").setAttribute("aria-expanded", "false");
    refreshModels();
    refreshStats();
  });
  $("#register-form").addEventListener("submit", (e) => { e.preventDefault(); register(); });
}

// --- management ---------------------------------------------------------------------------

// probeManagement asks the management API for one model, with a short timeout. Only if the
// browser may read the answer (CORS) and the key is accepted are the actions shown.
let probed = { at: 0, what: "" };
async function probeManagement(force) {
  const m = state.info && state.info.management;
  // Again only when something changed, or every 30 s: each probe is a request to the
  // management API.
  const what = JSON.stringify([m, keyStore.get("management")]);
  if (!force && what === probed.what && Date.now() - probed.at < 30000) return;
  probed = { at: Date.now(), what };
  let base = "";
  let why = "Registering, scaling and unregistering are on the management API.";
  if (m) {
    const candidate = `${m.tls ? "https" : "http"}://${location.hostname}:${m.port}`;
    try {
      const res = await mgmt(candidate, "/models?limit=1", { signal: AbortSignal.timeout(1500) });
      if (res.ok) base = candidate;
      else why = `The management API (port ${m.port}) refused this page: HTTP ${res.status}${state.info.tokenAuthorization ? "; enter the management key under Keys" : ""}.`;
    } catch {
      why = `The management API (port ${m.port}) is not reachable from this browser.`;
    }
  } else {
    why += " To use them from this page, list its origin in the server's management_allowed_origins.";
  }
  const changed = base !== state.management;
  state.management = base;
  $("#management").hidden = !base;
  $("#management-note").textContent = base ? `Management actions go to ${base}.` : why;
  if (changed) renderModels();
}

function mgmt(base, path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  const key = keyStore.get("management");
  if (key) headers.set("Authorization", "Bearer " + key);
  return fetch(base + path, { ...opts, headers });
}

async function managementCall(method, path, done) {
  const status = $("#management-status");
  status.textContent = "Working…";
  try {
    const res = await mgmt(state.management, path, { method });
    const body = await res.json().catch(() => ({}));
    status.textContent = body.status || body.message || `HTTP ${res.status}`;
  } catch (e) {
    status.textContent = "Failed: " + e.message;
  }
  if (done) done();
  refreshModels();
}

function versionPath(m) {
  return `/models/${encodeURIComponent(m.name)}/${encodeURIComponent(m.version)}`;
}

function scale(m, n) {
  if (n < 0) return;
  managementCall("PUT", `${versionPath(m)}?min_worker=${n}&synchronous=true`);
}

function unregister(m) {
  if (!confirm(`Unregister ${m.name} ${m.version}?`)) return;
  managementCall("DELETE", versionPath(m));
}

function register() {
  const q = new URLSearchParams({ url: $("#register-url").value.trim(), synchronous: "true" });
  if ($("#register-batch").value) q.set("batch_size", $("#register-batch").value);
  if ($("#register-workers").value) q.set("initial_workers", $("#register-workers").value);
  managementCall("POST", "/models?" + q, () => $("#register-form").reset());
}

// --- the live view -------------------------------------------------------------------------

const charts = [
  { key: "rps", title: "Requests/s", unit: "" },
  { key: "p50Ms", title: "p50 latency", unit: " ms" },
  { key: "p99Ms", title: "p99 latency", unit: " ms" },
  { key: "queue", title: "Queue depth", unit: "" },
  { key: "batch", title: "Batch size", unit: "" },
];

async function refreshStats() {
  if (document.hidden || state.needKey) return;
  let res;
  try { res = await api("/ui/api/stats"); } catch { return; }
  if (!res.ok) return;
  const stats = await res.json();
  const live = $("#live");
  // The x axis spans the points held, from one minute up to the whole window, so that a
  // page opened a moment ago does not draw a sliver at the right edge.
  const now = Date.now();
  const oldest = Math.min(now, ...stats.models.map((s) => (s.t && s.t[0]) || now));
  const span = Math.max(60000, Math.min(stats.intervalSeconds * 1000 * stats.points, now - oldest));
  const cards = stats.models.filter((s) => s.t && s.t.length).map((s) => {
    const grid = el("div", { class: "charts" });
    for (const c of charts) grid.append(chart(s, c, now - span, span));
    return el("article", { class: "model-live", "data-model": `${s.name}/${s.version}` },
      el("h3", { text: `${s.name} ${s.version}` }), grid);
  });
  if (cards.length === 0) cards.push(el("p", { class: "note", text: "Collecting the first samples…" }));
  live.replaceChildren(...cards);
}

function fmt(v) {
  if (v === null || v === undefined) return "—";
  if (Number.isInteger(v)) return String(v);
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

// chart is one quantity over the window, as an SVG line; gaps where there is no value.
function chart(s, c, start, span) {
  const values = s[c.key] || [];
  const latest = values.length ? values[values.length - 1] : null;
  const peak = Math.max(0, ...values.filter((v) => v !== null));
  const top = peak > 0 ? peak : 1;
  const W = 300, H = 48;
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${c.title} of ${s.name} ${s.version} over the last ${Math.round(span / 1000)} s; peak ${fmt(peak)}${c.unit}, latest ${fmt(latest)}${c.unit}`);
  let pts = [];
  const flush = () => {
    if (pts.length) {
      if (pts.length === 1) pts.push(pts[0]);
      const pl = document.createElementNS(NS, "polyline");
      pl.setAttribute("points", pts.join(" "));
      svg.append(pl);
    }
    pts = [];
  };
  values.forEach((v, i) => {
    if (v === null) { flush(); return; }
    const x = ((s.t[i] - start) / span) * W;
    const y = H - 2 - (v / top) * (H - 4);
    pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  });
  flush();
  return el("figure", { "data-metric": c.key },
    el("figcaption", {}, el("span", { text: c.title }), el("b", { text: fmt(latest) + (latest === null ? "" : c.unit) })),
    svg,
    el("small", { class: "peak", text: values.some((v) => v !== null) ? `peak ${fmt(peak)}${c.unit}` : "" }));
}

// --- start ---------------------------------------------------------------------------------

function every(ms, f) {
  const loop = async () => { try { await f(); } finally { setTimeout(loop, ms); } };
  loop();
}

document.addEventListener("DOMContentLoaded", () => {
  setUpForms();
  $("#inference-key").value = keyStore.get("inference");
  $("#management-key").value = keyStore.get("management");
  every(5000, refreshModels);
  every(2000, refreshStats);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshStats(); });
});
