// Narratoria console: plain JavaScript, no build step. Live data comes from
// /api/events (server-sent events); everything else from the JSON API.
"use strict";

const $ = (id) => document.getElementById(id);
const PAGE = 100; // plans per page

// Node colours by tool state.
const COLORS = {
  pending: "#e5e7eb", running: "#93c5fd", retrying: "#fdba74", success: "#86efac", failed: "#fca5a5",
  skipped: "#f3f4f6", timeout: "#b91c1c", awaiting_approval: "#fcd34d", cancelled: "#d8b4fe",
};
const FINISHED = { succeeded: 1, failed: 1, timeout: 1, cancelled: 1 };

const state = {
  plans: new Map(),    // planId -> {planId, sessionId, state, at}
  order: [],           // planIds, newest first
  page: 0,
  selected: "",        // planId shown
  tool: "",            // toolId shown
  status: null,        // PlanStatus or a status built from a result
  result: null,        // the selected plan's Execution Result once finished
  scripts: new Map(),  // planId/toolId -> [events]
  progress: new Map(), // planId/toolId -> percent
  latest: new Map(),   // planId/toolId -> the last progress event of the tool
  results: new Map(),  // planId -> Execution Result (the newest 200)
  followSession: "",   // select the next plan that starts in this session
  renderQueued: false,
  source: null,
};

// --- helpers ---------------------------------------------------------------

function showError(msg) {
  const e = $("error");
  e.textContent = msg || "";
  e.hidden = !msg;
}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  if (resp.status === 401 && path !== "/api/login") showLogin(); // signed out or expired
  let data = null;
  try { data = await resp.json(); } catch (_) { data = null; }
  if (!resp.ok) {
    const err = new Error((data && data.error) || resp.status + " " + resp.statusText);
    err.status = resp.status;
    throw err;
  }
  return data;
}

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") n.className = v;
    else if (k.startsWith("data-")) n.setAttribute(k, v);
    else if (k === "text") n.textContent = v;
    else n[k] = v;
  }
  for (const c of children) if (c != null) n.append(c);
  return n;
}

function session() { return $("session").value.trim() || "demo"; }
function short(id) { return (id || "").slice(0, 8); }

// --- plans list (paged, re-rendered at most once per frame) ---------------

function notePlan(planId, sessionId, st) {
  if (!planId) return;
  let p = state.plans.get(planId);
  if (!p) {
    p = { planId, sessionId: sessionId || "", state: st || "running", at: Date.now() };
    state.plans.set(planId, p);
    state.order.unshift(planId);
  } else if (st) {
    p.state = st;
  }
  queueRender();
}

function queueRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(() => { state.renderQueued = false; renderPlans(); });
}

function renderPlans() {
  const list = $("plans");
  const pages = Math.max(1, Math.ceil(state.order.length / PAGE));
  state.page = Math.min(state.page, pages - 1);
  const ids = state.order.slice(state.page * PAGE, (state.page + 1) * PAGE);
  list.replaceChildren(...ids.map((id) => {
    const p = state.plans.get(id);
    return el("li", { class: "plan-item" + (id === state.selected ? " selected" : ""), "data-plan-id": id },
      el("span", {}, el("code", { text: short(id) }), " ", el("small", { text: p.sessionId })),
      el("span", { class: "badge " + p.state, text: p.state }));
  }));
  $("plans-count").textContent = String(state.order.length);
  $("plans-prev").disabled = state.page === 0;
  $("plans-next").disabled = state.page >= pages - 1;
}

// --- the selected plan ----------------------------------------------------

async function selectPlan(planId) {
  state.selected = planId;
  state.tool = "";
  state.status = null;
  state.result = null;
  $("plan").setAttribute("data-plan-id", planId);
  $("plan-title").textContent = "Plan " + planId;
  if (location.hash !== "#/plans/" + planId) history.replaceState(null, "", "#/plans/" + planId);
  queueRender();
  await refreshPlan();
}

async function refreshPlan() {
  const planId = state.selected;
  if (!planId) return;
  if (state.results.has(planId)) { // finished: its result says everything
    applyResult(state.results.get(planId));
    drawPlan();
    return;
  }
  try {
    const st = await api("GET", "/api/plans/" + planId);
    if (planId !== state.selected) return;
    if (state.results.has(planId)) { applyResult(state.results.get(planId)); drawPlan(); return; }
    if (st.result) { await loadResult(planId); drawPlan(); return; } // finished: its result says everything
    // Events that came while the status was on its way are newer than it
    // (a tool's wait for approval among them, with the input it would run
    // with: the status may have been read while the tool was pending).
    for (const t of st.tools || []) {
      const p = state.latest.get(planId + "/" + t.toolId);
      if (p) applyProgress(t, p);
    }
    state.status = st;
    notePlan(planId, st.sessionId, st.cancelled ? "cancelled" : (st.phase === "running" ? "running" : undefined));
  } catch (e) {
    if (e.status !== 404) { showError(e.message); return; }
    await loadResult(planId); // finished: draw it from its result
  }
  drawPlan();
}

async function loadResult(planId) {
  try {
    const res = await api("GET", "/api/results/" + planId);
    if (planId === state.selected) applyResult(res);
  } catch (e) {
    if (e.status !== 404) showError(e.message);
  }
}

// applyResult shows a finished plan from its Execution Result.
function applyResult(res) {
  state.result = res;
  loadInputs(res.planId);
  // Dependencies come from the plan in the result (finalPlan when it was
  // re-planned), else from the status seen while it ran.
  const deps = new Map();
  const plan = res.finalPlan || res.originalPlan;
  for (const t of (plan && plan.tools) || []) deps.set(t.toolId, t.dependencies || []);
  for (const t of (state.status && state.status.tools) || []) if (!deps.has(t.toolId)) deps.set(t.toolId, t.dependencies || []);
  const tools = (res.toolResults || []).map((tr) => ({ toolId: tr.toolId, skill: tr.skill, state: tr.state,
    attempt: (tr.retryCount || 0) + 1, dependencies: tr.dependencies || deps.get(tr.toolId) || [],
    executionTimeMs: tr.executionTimeMs || 0, error: tr.error, history: tr.history || [] }));
  const versions = state.status && state.status.versions ? state.status.versions
    : [{ version: 0, state: "original", toolIds: tools.map((t) => t.toolId) }];
  state.status = { planId: res.planId, sessionId: res.sessionId, phase: "published", tools, versions,
    cancelled: res.failureReason === "cancelled" };
  const outcome = res.success ? "succeeded" : (res.failureReason === "cancelled" ? "cancelled" : (res.failureReason === "timeout" ? "timeout" : "failed"));
  notePlan(res.planId, res.sessionId, outcome);
}

// loadInputs fetches, once per plan, the input each tool of a finished
// plan ran with (its references resolved from the result).
async function loadInputs(planId) {
  if (state.inputs && state.inputs.planId === planId) return;
  state.inputs = { planId, inputs: {} };
  try {
    const data = await api("GET", "/api/results/" + planId + "/inputs");
    if (state.inputs.planId === planId) { state.inputs.inputs = data.inputs || {}; drawTool(); }
  } catch (e) { if (e.status !== 404) showError(e.message); }
}

// rerun runs the selected plan (or one of its tools) again and opens the new plan.
function rerun(tool) {
  act(async () => {
    const path = "/api/plans/" + state.selected + (tool ? "/tools/" + encodeURIComponent(tool) : "") + "/rerun";
    const data = await api("POST", path, {});
    location.hash = "#/plans/" + data.planId;
  });
}

// layout gives each tool a column (longest path from a root) and a row.
function layout(tools) {
  const byId = new Map(tools.map((t) => [t.toolId, t]));
  const depth = new Map();
  const visit = (id, seen) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const t = byId.get(id);
    let d = 0;
    for (const dep of (t && t.dependencies) || []) if (byId.has(dep)) d = Math.max(d, visit(dep, seen) + 1);
    depth.set(id, d);
    return d;
  };
  tools.forEach((t) => visit(t.toolId, new Set()));
  const rows = new Map();
  const pos = new Map();
  for (const t of tools) {
    const c = depth.get(t.toolId) || 0;
    const r = rows.get(c) || 0;
    rows.set(c, r + 1);
    pos.set(t.toolId, { x: 20 + c * 190, y: 20 + r * 70 });
  }
  return pos;
}

const NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const n = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  return n;
}

function nodeLabel(t) {
  const pct = state.progress.get(state.selected + "/" + t.toolId);
  let s = t.state;
  if (t.state === "running" && pct != null) s += " " + pct + "%";
  if (t.state === "retrying") s += " (attempt " + (t.attempt + 1) + ")";
  return s;
}

function drawPlan() {
  const st = state.status;
  const dag = $("dag");
  dag.replaceChildren();
  const running = st && st.phase === "running" && !st.cancelled;
  $("cancel-plan").disabled = !running;
  $("rerun-plan").disabled = !state.result;
  const p = state.plans.get(state.selected);
  $("plan-state").textContent = p ? p.state : "";
  $("plan-state").className = "badge " + (p ? p.state : "");
  if (!st) return;
  const defs = svg("defs");
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "6", markerHeight: "6", orient: "auto" });
  marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9ca3af" }));
  defs.append(marker);
  dag.append(defs);
  const pos = layout(st.tools);
  let w = 200, h = 80;
  for (const t of st.tools) {
    for (const dep of t.dependencies || []) {
      const a = pos.get(dep), b = pos.get(t.toolId);
      if (!a || !b) continue;
      dag.append(svg("path", { class: "edge", d: `M${a.x + 140},${a.y + 22} C${a.x + 165},${a.y + 22} ${b.x - 25},${b.y + 22} ${b.x},${b.y + 22}` }));
    }
  }
  for (const t of st.tools) {
    const { x, y } = pos.get(t.toolId);
    w = Math.max(w, x + 170); h = Math.max(h, y + 70);
    const g = svg("g", { class: "node" + (t.toolId === state.tool ? " selected" : ""), "data-tool-id": t.toolId, "data-state": t.state,
      transform: `translate(${x},${y})` });
    g.append(svg("rect", { width: "140", height: "44", fill: COLORS[t.state] || "#fff" }));
    const t1 = svg("text", { x: "8", y: "17" }); t1.textContent = t.toolId.length > 20 ? t.toolId.slice(0, 19) + "…" : t.toolId;
    const t2 = svg("text", { x: "8", y: "34", class: "state" }); t2.textContent = nodeLabel(t);
    g.append(t1, t2);
    g.addEventListener("click", () => { state.tool = t.toolId; drawPlan(); });
    dag.append(g);
  }
  dag.setAttribute("width", String(w));
  dag.setAttribute("height", String(h));
  $("versions").replaceChildren(...(st.versions || []).map((v) => el("li", {},
    el("b", { text: "v" + v.version + " " }), el("span", { class: "badge", text: v.state }), " ",
    (v.toolIds || []).join(", "), v.suggestion ? el("div", { class: "meta", text: "asked: " + v.suggestion }) : null,
    v.reason ? el("div", { class: "meta", text: v.reason }) : null)));
  drawTimeline();
  drawTool();
}

// --- the timeline -----------------------------------------------------------

// Bar colours of the timeline by the state a tool was in.
const SPANS = { running: "#3b82f6", awaiting_approval: "#f59e0b", retrying: "#fb923c" };

// spans cuts a tool's history into intervals: [state, from, to, attempt].
// The last one ends now while the plan runs, else at its own start.
function spans(history, end) {
  const out = [];
  for (let i = 0; i < history.length; i++) {
    const h = history[i];
    const from = Date.parse(h.at);
    const to = i + 1 < history.length ? Date.parse(history[i + 1].at) : end;
    if (!isNaN(from) && to > from && SPANS[h.state]) out.push([h.state, from, to, h.attempt || 0]);
  }
  return out;
}

// ranMs is how long a tool ran: the sum of its running intervals.
function ranMs(history, end) {
  return spans(history, end).filter((s) => s[0] === "running").reduce((n, s) => n + s[2] - s[1], 0);
}

// drawTimeline draws each tool's attempts as bars on one time axis (a
// Gantt chart): running, waiting for approval, waiting to retry. Each row
// says how long the tool really ran, whatever the script reported.
function drawTimeline() {
  const tl = $("timeline");
  tl.replaceChildren();
  const st = state.status;
  if (!st) return;
  const live = st.phase === "running";
  const all = st.tools.flatMap((t) => (t.history || []).map((h) => Date.parse(h.at))).filter((x) => !isNaN(x));
  if (!all.length) return;
  const start = Math.min(...all);
  const end = live ? Date.now() : Math.max(...all);
  const span = Math.max(end - start, 1);
  const left = 170, width = 420, row = 22, top = 22;
  tl.append(timeAxis(start, span, left, width, top - 6, 6 + st.tools.length * row + top));
  st.tools.forEach((t, i) => {
    const y = top + i * row;
    const g = svg("g", { class: "lane", "data-tool-id": t.toolId });
    const name = svg("text", { x: "0", y: String(y + 13) });
    name.textContent = t.toolId.length > 16 ? t.toolId.slice(0, 15) + "…" : t.toolId;
    g.append(name);
    for (const [stt, from, to, attempt] of spans(t.history || [], live ? Date.now() : lastAt(t, end))) {
      const bar = svg("rect", { class: "span " + stt, "data-state": stt, x: String(left + ((from - start) / span) * width), y: String(y + 2),
        width: String(Math.max(2, ((to - from) / span) * width)), height: String(row - 8), fill: SPANS[stt] });
      const tip = svg("title");
      tip.textContent = `${stt}${attempt ? " (attempt " + attempt + ")" : ""}: ${to - from} ms`;
      bar.append(tip);
      g.append(bar);
    }
    const ms = ranMs(t.history || [], live ? Date.now() : lastAt(t, end));
    const d = svg("text", { class: "duration", x: String(left + width + 8), y: String(y + 13), "data-ms": String(ms) });
    d.textContent = ms + " ms";
    g.append(d);
    tl.append(g);
  });
  tl.setAttribute("width", String(left + width + 80));
  tl.setAttribute("height", String(12 + top + st.tools.length * row));
}

// axisStep is a round step for about five ticks over span ms.
function axisStep(span) {
  for (const s of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000, 1800000, 3600000]) {
    if (span / s <= 6) return s;
  }
  return Math.ceil(span / 6 / 3600000) * 3600000;
}

// axisLabel names a tick: time since the plan's first transition.
function axisLabel(ms) {
  if (ms === 0) return "0";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000) + " s";
  return Math.floor(ms / 60000) + " min" + (ms % 60000 ? " " + Math.round((ms % 60000) / 1000) + " s" : "");
}

// timeAxis is the timeline's time axis: a line over the lanes with a
// tick, a label and a faint guide every round step from the start, and
// the start's clock time.
function timeAxis(start, span, left, width, y, bottom) {
  const g = svg("g", { class: "axis" });
  g.append(svg("line", { x1: String(left), x2: String(left + width), y1: String(y), y2: String(y), stroke: "#9ca3af" }));
  const step = axisStep(span);
  for (let ms = 0; ms <= span; ms += step) {
    const x = left + (ms / span) * width;
    g.append(svg("line", { class: "guide", x1: String(x), x2: String(x), y1: String(y), y2: String(bottom), stroke: "#eef0f3" }));
    g.append(svg("line", { x1: String(x), x2: String(x), y1: String(y - 4), y2: String(y), stroke: "#9ca3af" }));
    const label = svg("text", { class: "tick", x: String(x), y: String(y - 6), "text-anchor": "middle", "data-ms": String(ms) });
    label.textContent = axisLabel(ms);
    g.append(label);
  }
  const t0 = svg("text", { class: "origin", x: "0", y: String(y - 6) });
  t0.textContent = new Date(start).toLocaleTimeString();
  g.append(t0);
  return g;
}

// lastAt is where a finished tool's last interval ends: its last
// transition (the end state itself has no length).
function lastAt(t, end) {
  const h = t.history || [];
  return h.length ? Date.parse(h[h.length - 1].at) : end;
}

// applyProgress lays a tool's progress event over its status: live, and
// over a status read before the event came.
function applyProgress(t, p) {
  t.state = p.state;
  if (p.attempt) t.attempt = p.attempt;
  if (p.state === "running" && !t.dispatchedAt) t.dispatchedAt = p.at;
  if (p.error && !(t.error && t.error.message === p.error)) t.error = { message: p.error }; // the status's has details
  if (p.input !== undefined) t.input = p.input; // what a tool waiting for approval would run with
}

// updateNode changes one tool's state in place from a progress event.
function updateNode(p) {
  const st = state.status;
  if (!st) return;
  const t = st.tools.find((x) => x.toolId === p.toolId);
  if (!t) { refreshPlan(); return; } // a tool added by context re-planning
  applyProgress(t, p);
  const g = document.querySelector(`#dag g.node[data-tool-id="${CSS.escape(p.toolId)}"]`);
  if (!g) { drawPlan(); return; }
  g.setAttribute("data-state", t.state);
  g.querySelector("rect").setAttribute("fill", COLORS[t.state] || "#fff");
  g.querySelector("text.state").textContent = nodeLabel(t);
  if (p.toolId === state.tool) drawTool();
}

function drawTool() {
  const st = state.status;
  const t = st && st.tools.find((x) => x.toolId === state.tool);
  $("approve-tool").hidden = $("deny-tool").hidden = !(t && t.state === "awaiting_approval");
  if (!t) {
    $("tool-title").textContent = "Click a tool";
    $("tool-fields").replaceChildren();
    $("tool-output").textContent = $("tool-events").textContent = $("tool-stderr").textContent = $("tool-input").textContent = "";
    $("tool-assets").replaceChildren();
    $("tool-history").replaceChildren();
    $("rerun-tool").hidden = true;
    return;
  }
  $("tool-title").textContent = t.toolId + " (" + t.skill + ")";
  const fields = [["state", nodeLabel(t)], ["attempt", t.attempt], ["dispatched", t.dispatchedAt || ""],
    ["time", (t.executionTimeMs || 0) + " ms"], ["depends on", (t.dependencies || []).join(", ")], ["error", t.error ? t.error.message : ""]];
  $("tool-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })]));
  const tr = state.result && (state.result.toolResults || []).find((x) => x.toolId === t.toolId);
  $("tool-output").textContent = tr && tr.output != null ? JSON.stringify(tr.output, null, 2) : "";
  $("tool-assets").replaceChildren(...pictures(((state.result && state.result.aggregatedAssets) || []).filter((a) => a.toolId === t.toolId)));
  // The result's events are every attempt's; before it, those seen live.
  const events = tr && tr.events && tr.events.length ? tr.events : (state.scripts.get(state.selected + "/" + t.toolId) || []);
  $("tool-events").textContent = events.slice(-50).map((e) => JSON.stringify(e)).join("\n");
  // The script's log and error events, then its stderr tail when it failed.
  const stderr = t.error && t.error.details && t.error.details.stderrTail;
  $("tool-stderr").textContent = events.filter((e) => e && (e.type === "log" || e.type === "error")).slice(-10)
    .map((e) => e.message || e.errorMessage || JSON.stringify(e)).concat(stderr ? ["stderr:", String(stderr)] : []).join("\n");
  // The input it ran with (from the result), or, while it waits for
  // approval, the input it would run with: what the decision approves.
  let input = state.inputs && state.inputs.planId === state.selected ? state.inputs.inputs[t.toolId] : undefined;
  if (input === undefined && t.input !== undefined) input = t.input;
  $("tool-input").textContent = input !== undefined ? JSON.stringify(input, null, 2) : (state.result ? "" : "(resolved when the tool starts)");
  $("tool-input").setAttribute("data-awaiting", t.state === "awaiting_approval" && t.input !== undefined ? "true" : "false");
  // Each transition: the state, when, which attempt, why (retry delays and
  // approval waits show as the time between two lines).
  const hist = t.history || [];
  $("tool-history").replaceChildren(...hist.map((h, i) => {
    const next = i + 1 < hist.length ? Date.parse(hist[i + 1].at) : NaN;
    const lasted = isNaN(next) ? "" : ` · ${next - Date.parse(h.at)} ms`;
    return el("li", { class: "transition", "data-state": h.state },
      el("span", { class: "badge " + h.state, text: h.state }),
      el("span", { class: "meta", text: ` ${new Date(h.at).toLocaleTimeString()}${h.attempt ? " · attempt " + h.attempt : ""}${lasted}` }),
      h.cause ? el("div", { class: "meta", text: h.cause }) : null);
  }));
  $("rerun-tool").hidden = !state.result;
}

// --- narrations and skills ------------------------------------------------

// pictures are <img> elements for the image assets that were stored as
// objects (served by /api/assets/<object>).
function pictures(assets) {
  return (assets || []).filter((a) => a.object && /^image\//.test(a.mediaType || ""))
    .map((a) => el("img", { class: "asset", src: "/api/assets/" + encodeURIComponent(a.object), alt: a.assetId, title: a.assetId }));
}

// showProse grows the narration a model is writing, piece by piece; the
// narration that follows replaces it.
function showProse(c) {
  if (c.sessionId !== session()) return;
  const id = "prose-" + c.promptId;
  let li = document.getElementById(id);
  if (c.seq === 1 && li) { li.remove(); li = null; }
  if (!li) {
    li = el("li", { class: "narration streaming", id }, el("div", { class: "text" }),
      el("div", { class: "meta", text: "being written…" }));
    $("sessions").prepend(li);
  }
  li.firstChild.textContent += c.text || "";
  if (c.done) li.lastChild.textContent = c.fallback ? "the model failed: the narration follows" : "written";
}

function addNarration(n) {
  if (n.sessionId !== session()) return;
  const streaming = document.getElementById("prose-" + n.promptId);
  if (streaming) streaming.remove();
  const badges = [];
  if (n.fallback) badges.push(el("span", { class: "badge fallback", text: "fallback" }));
  if (n.cancelled) badges.push(el("span", { class: "badge cancelled", text: "cancelled" }));
  const li = el("li", { class: "narration", "data-plan-id": n.planId || "" },
    n.prompt ? el("div", { class: "prompt", text: "“" + n.prompt + "”" }) : null,
    el("div", { class: "text", text: n.text || "" }),
    el("div", {}, ...(n.choices || []).map((c) => el("span", { class: "chip", text: (c && (c.label || c.id)) || JSON.stringify(c) }))),
    // Pictures the scripts drew, from the asset object store.
    el("div", { class: "assets" }, ...pictures(n.assets)),
    n.state && Object.keys(n.state).length ? el("details", { class: "meta" }, el("summary", { text: "session state" }),
      el("pre", { text: JSON.stringify(n.state, null, 2) })) : null,
    el("div", { class: "meta", text: `${n.attempts || 0} attempt(s), ${n.durationMs || 0} ms ` }, ...badges,
      // Each attempt's plan: the replans of the prompt, oldest first.
      ...(n.trace || []).map((tr, i) => {
        const a = el("a", { href: "#", class: "chip attempt", "data-plan-id": tr.planId,
          text: `attempt ${i + 1} ${tr.success ? "✓" : "✗ " + (tr.failureReason || "")}` });
        a.onclick = (e) => { e.preventDefault(); e.stopPropagation(); selectPlan(tr.planId); };
        return a;
      })));
  li.onclick = () => n.planId && selectPlan(n.planId);
  $("sessions").prepend(li);
  while ($("sessions").children.length > 200) $("sessions").lastChild.remove();
}

async function loadSkills() {
  try {
    const data = await api("GET", "/api/skills?session=" + encodeURIComponent(session()));
    $("skills").replaceChildren(...(data.skills || []).map((s) => el("li", { "data-skill": s.name },
      el("b", { text: s.name }), " ", el("small", { text: s.version }), " ",
      el("span", { class: "badge", text: (s.workers || []).length + " worker(s)" }), " ",
      el("span", { class: "badge", text: (s.health || {})[session()] || "healthy" }),
      el("div", { class: "meta", text: "scripts: " + (s.scripts || []).map((x) => x.name).join(", ") }),
      el("div", { class: "meta" }, ...(s.workers || []).map((w) =>
        el("span", { class: "chip", title: w.host || "", text: `${short(w.id)} ${w.running || 0}/${w.concurrency || 0} busy` }))),
      dispatchLine(s.dispatch))));
  } catch (e) { showError(e.message); }
}

// dispatchLine shows a skill's fair dispatch (issue 49): its jobs admitted
// to the work queue and held back, and each tenant's share and recent wait.
function dispatchLine(d) {
  if (!d || (!d.admitted && !d.waiting && !(d.tenants || []).length)) return el("div", { class: "meta" });
  return el("div", { class: "meta dispatch", title: "fair dispatch: jobs admitted to the work queue / held back while the skill's workers are saturated; wait = dispatch to the script's start, p50 / p99 of recent jobs" },
    el("span", { text: `queue: ${d.admitted} admitted, ${d.waiting} waiting ` }),
    ...(d.tenants || []).map((t) => el("span", { class: "chip",
      text: `${t.tenant || "(no tenant)"} ×${t.weight}: ${t.inFlight} admitted, ${t.waiting} waiting, wait ${Math.round(t.waitP50Ms)} / ${Math.round(t.waitP99Ms)} ms` })));
}

async function loadPlans() {
  try {
    const data = await api("GET", "/api/plans");
    for (const p of data.plans || []) notePlan(p.planId, p.sessionId);
  } catch (e) { if (e.status !== 503) showError(e.message); }
}

// --- history ----------------------------------------------------------------

const hist = { cursors: [0], page: 0 };

// historyQuery is the search the form describes, as URL parameters.
function historyQuery(before) {
  const q = new URLSearchParams();
  for (const k of ["session", "state", "skill", "reason", "plan"]) {
    const v = $("history-" + k).value.trim();
    if (v) q.set(k, v);
  }
  for (const k of ["from", "to"]) {
    const v = $("history-" + k).value;
    if (v) q.set(k, new Date(v).toISOString().replace(/\.\d{3}Z$/, "Z"));
  }
  if (before) q.set("before", String(before));
  return q;
}

// searchHistory shows a page of finished plans, newest first, read from
// the results stream: every plan it holds, also those before the page opened.
async function searchHistory(page) {
  if (page === 0) hist.cursors = [0];
  hist.page = page;
  try {
    const data = await api("GET", "/api/history?" + historyQuery(hist.cursors[page]));
    hist.cursors[page + 1] = data.next;
    $("history-count").textContent = String(data.total) + (data.loading ? "…" : "");
    $("history-list").replaceChildren(...data.plans.map((p) => el("li", { class: "hist-item", "data-plan-id": p.planId },
      el("a", { href: "#/plans/" + p.planId }, el("code", { text: short(p.planId) })), " ",
      el("a", { href: "#/sessions/" + encodeURIComponent(p.sessionId), class: "session-link", text: p.sessionId }), " ",
      el("span", { class: "badge " + p.state, text: p.state }),
      p.prompt ? el("div", { class: "prompt", text: "“" + p.prompt + "”" }) : null,
      el("div", { class: "meta", text: `${(p.skills || []).join(", ")} · ${p.executionTimeMs} ms · ${new Date(p.finishedAt).toLocaleString()}` +
        (p.failureReason ? " · " + p.failureReason : "") }))));
    $("history-prev").disabled = page === 0;
    $("history-next").disabled = !data.next;
  } catch (e) { showError(e.message); }
}

// refreshHistory searches again, at most once a second, while the first
// page is shown: plans that finish appear in the list as they do.
function refreshHistory() {
  if (hist.page !== 0 || hist.timer) return;
  hist.timer = setTimeout(() => { hist.timer = 0; if (hist.page === 0) searchHistory(0); }, 1000);
}

// showSession makes a session the current one: its narrations (read from
// the narrations stream) and its plans in the history.
async function showSession(id) {
  $("session").value = id;
  $("history-session").value = id;
  $("sessions").replaceChildren();
  searchHistory(0);
  loadSkills();
  try {
    const data = await api("GET", "/api/sessions/" + encodeURIComponent(id) + "/narrations");
    for (const n of data.narrations || []) addNarration(n);
  } catch (e) { showError(e.message); }
}

// route follows the URL: #/plans/<id> opens a plan, #/sessions/<id> a session.
function route() {
  const m = location.hash.match(/^#\/(plans|sessions)\/(.+)$/);
  if (!m) return;
  const id = decodeURIComponent(m[2]);
  if (m[1] === "plans" && id !== state.selected) selectPlan(id);
  if (m[1] === "sessions") showSession(id);
}

// --- live events ----------------------------------------------------------

function connect() {
  if (state.source) state.source.close();
  const src = new EventSource("/api/events");
  state.source = src;
  src.onopen = () => { $("live").textContent = "live"; $("live").className = "live on"; };
  src.onerror = () => { $("live").textContent = "reconnecting"; $("live").className = "live off"; };
  const on = (kind, fn) => src.addEventListener(kind, (ev) => {
    let data;
    try { data = JSON.parse(ev.data); } catch (_) { return; }
    try { fn(data); } catch (err) { console.warn("console:", err); }
  });
  on("progress", (p) => {
    if (!p.toolId) {
      const st = p.state === "started" ? "running" : (FINISHED[p.state] ? p.state : undefined);
      notePlan(p.planId, p.sessionId, st);
      if (p.state === "started" && state.followSession && p.sessionId === state.followSession) {
        state.followSession = "";
        selectPlan(p.planId);
      } else if (p.planId === state.selected && (p.state === "resumed" || p.state === "paused_for_context")) {
        refreshPlan();
      }
      return;
    }
    notePlan(p.planId, p.sessionId);
    if (p.progress != null) state.progress.set(p.planId + "/" + p.toolId, p.progress);
    const prev = state.latest.get(p.planId + "/" + p.toolId);
    if (!(p.state === "running" && prev && prev.state !== "running" && prev.state !== "pending" && prev.state !== "retrying")) {
      state.latest.set(p.planId + "/" + p.toolId, p);
    }
    if (p.planId === state.selected) updateNode(p);
  });
  on("prose", showProse);
  on("script", (s) => {
    const key = s.planId + "/" + s.toolId;
    const list = state.scripts.get(key) || [];
    list.push(s.event);
    if (list.length > 200) list.shift();
    state.scripts.set(key, list);
    if (s.planId === state.selected && s.toolId === state.tool) drawTool();
  });
  on("result", (r) => {
    refreshHistory();
    state.results.set(r.planId, r);
    if (state.results.size > 200) state.results.delete(state.results.keys().next().value);
    const outcome = r.success ? "succeeded" : (r.failureReason === "cancelled" ? "cancelled" : "failed");
    notePlan(r.planId, r.sessionId, outcome);
    if (r.planId === state.selected) { applyResult(r); drawPlan(); }
  });
  on("narration", (n) => { addNarration(n); refreshHistory(); }); // a card shows its prompt once the narration names it
  on("health", () => loadSkills());
  // The skills' fair dispatch (queues, waits) changes without an event.
  setInterval(() => { if (!document.hidden) loadSkills(); }, 5000);
}

// --- actions --------------------------------------------------------------

async function act(fn) {
  showError("");
  try { await fn(); } catch (e) { showError(e.message); }
}

function sendPrompt() {
  const text = $("prompt-text").value.trim();
  if (!text) return;
  act(async () => {
    state.followSession = session();
    await api("POST", "/api/prompt", { sessionId: session(), text });
    $("prompt-text").value = "";
  });
}

function init() {
  $("send-prompt").onclick = sendPrompt;
  $("prompt-text").addEventListener("keydown", (e) => { if (e.key === "Enter") sendPrompt(); });
  $("reset-session").onclick = () => act(() => api("POST", "/api/sessions/" + encodeURIComponent(session()) + "/reset", {}).then(loadSkills));
  $("cancel-plan").onclick = () => act(() => api("POST", "/api/plans/" + state.selected + "/cancel", { reason: "cancelled from the console" }));
  const decide = (verb) => () => act(() => api("POST", `/api/plans/${state.selected}/tools/${encodeURIComponent(state.tool)}/${verb}`, { reason: verb + "d from the console" }));
  $("approve-tool").onclick = decide("approve");
  $("rerun-plan").onclick = () => rerun("");
  $("rerun-tool").onclick = () => rerun(state.tool);
  $("deny-tool").onclick = decide("deny");
  // One handler on the list: items are re-rendered while the user clicks.
  $("plans").addEventListener("click", (e) => {
    const li = e.target.closest("li.plan-item");
    if (li) selectPlan(li.getAttribute("data-plan-id"));
  });
  $("plans-prev").onclick = () => { state.page = Math.max(0, state.page - 1); renderPlans(); };
  $("plans-next").onclick = () => { state.page += 1; renderPlans(); };
  $("session").addEventListener("change", () => { $("sessions").replaceChildren(); loadSkills(); });
  $("history-form").addEventListener("submit", (e) => { e.preventDefault(); searchHistory(0); });
  $("history-prev").onclick = () => searchHistory(Math.max(0, hist.page - 1));
  $("history-next").onclick = () => searchHistory(hist.page + 1);
  window.addEventListener("hashchange", route);
  connect();
  loadPlans();
  loadSkills();
  searchHistory(0);
  route();
  setInterval(loadSkills, 5000);
}

// --- logins, roles and the audit trail -------------------------------------

const auth = { me: null, started: false, auditBefore: 0, auditTimer: 0 };

function showLogin() {
  auth.me = null;
  document.body.classList.add("signed-out");
  document.body.removeAttribute("data-role");
  $("login").hidden = false;
  $("whoami").textContent = "";
  $("logout").hidden = true;
  if (state.source) { state.source.close(); state.source = null; }
}

function signedIn(me) {
  auth.me = me;
  document.body.classList.remove("signed-out");
  document.body.setAttribute("data-role", me.role);
  $("login").hidden = true;
  $("login-error").textContent = "";
  $("whoami").textContent = "signed in as " + me.name + " (" + (me.role === "gamemaster" ? "game master" : me.role) + ")";
  $("tenant").textContent = me.tenant ? "tenant " + me.tenant : (me.acrossTenants ? "all tenants" : "");
  $("tenant").hidden = !me.tenant && !me.acrossTenants;
  $("logout").hidden = false;
  if (!auth.started) { auth.started = true; init(); } else { connect(); loadPlans(); loadSkills(); }
  loadAudit(0);
  if (!auth.auditTimer) auth.auditTimer = setInterval(() => { if (auth.me && !auth.auditBefore) loadAudit(0); }, 3000);
}

async function login(ev) {
  ev.preventDefault();
  $("login-error").textContent = "";
  try {
    const me = await api("POST", "/api/login", { name: $("login-name").value.trim(), password: $("login-password").value });
    $("login-password").value = "";
    signedIn(await api("GET", "/api/me").catch(() => me));
  } catch (e) { $("login-error").textContent = e.message; }
}

async function logout() {
  try { await api("POST", "/api/logout", {}); } catch (_) { /* signed out anyway */ }
  showLogin();
}

// loadAudit shows a page of the audit trail, newest first (before: a
// sequence, 0 for the newest): the actions, or the refused logins (one
// entry per source address and minute).
async function loadAudit(before) {
  const kind = $("audit-kind").value;
  try {
    const data = await api("GET", "/api/audit?limit=50" + (kind ? "&kind=" + kind : "") + (before ? "&before=" + before : ""));
    auth.auditBefore = before;
    $("audit").replaceChildren(...(data.entries || []).map((a) => kind === "logins" ? refusedItem(a) : auditItem(a)));
    $("audit-older").disabled = !data.next;
    $("audit-older").onclick = () => loadAudit(data.next);
  } catch (e) { if (e.status !== 401) showError(e.message); }
}

function auditItem(a) {
  return el("li", { class: "audit-item outcome-" + a.outcome, "data-action": a.action, "data-user": a.user },
    el("b", { class: "who", text: a.user || "?" }), " ", el("small", { text: "(" + (a.role || "-") + ")" }), " ",
    el("span", { class: "what", text: a.action }), " ", el("span", { class: "badge", text: a.outcome }),
    el("div", { class: "meta", text: new Date(a.time).toLocaleString() +
      (a.plan ? " plan " + short(a.plan) : "") + (a.tool ? " tool " + a.tool : "") + (a.session ? " session " + a.session : "") +
      (a.reason ? " — " + a.reason : "") + (a.error ? " — " + a.error : "") }));
}

function refusedItem(a) {
  return el("li", { class: "audit-item outcome-refused", "data-action": "login", "data-remote": a.remote },
    el("b", { class: "who", text: a.remote || "?" }), " ",
    el("span", { class: "what", text: "login ×" + a.count }), " ", el("span", { class: "badge", text: a.throttled ? a.throttled + " throttled" : "refused" }),
    el("div", { class: "meta", text: new Date(a.time).toLocaleTimeString() + "–" + new Date(a.until).toLocaleTimeString() +
      (a.users ? " — tried " + a.users.join(", ") : "") + (a.addresses ? " — from " + a.addresses + " addresses" : "") }));
}

async function boot() {
  $("login").addEventListener("submit", login);
  $("logout").onclick = logout;
  $("audit-newest").onclick = () => loadAudit(0);
  $("audit-kind").onchange = () => loadAudit(0);
  try { signedIn(await api("GET", "/api/me")); } catch (e) { showLogin(); if (e.status !== 401) $("login-error").textContent = e.message; }
}

boot();
