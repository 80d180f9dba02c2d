// The jformer page: translate with /v1/translate (or, with "Stream", line by line with
// /v1/translate/stream, shown as it is decoded), show cross-attention from /v1/attention.
// Plain script, no build step and nothing fetched from elsewhere: works offline.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { attention: null, lines: [] };

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch (e) { /* not JSON */ }
  if (!response.ok) {
    const message = data && data.error ? data.error.message : response.statusText;
    throw new Error(`${response.status}: ${message}`);
  }
  return data;
}

// ------------------------------------------------------------------ readiness
async function waitUntilReady() {
  const status = $("status");
  for (;;) {
    try {
      await api("/v1/ready");
      const model = await api("/v1/model");
      $("languages").textContent = `${model.source_lang} → ${model.target_lang}`;
      const beam = $("beam-size");
      beam.max = model.limits.max_beam;
      beam.value = model.decode.beam_size;
      status.textContent = `ready · step ${model.step ?? "?"}`;
      status.className = "status ready";
      $("translate").disabled = false;
      return;
    } catch (e) {
      status.textContent = e.message.startsWith("503") ? "loading the model…" : "server unreachable";
      status.className = "status down";
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }
}

// ------------------------------------------------------------------ steering
const splitLines = (text) => text.split(/\r\n|\r|\n/);

// The request fields of the "Steer" panel for these source lines: target_prefix (one per
// line), prefix_bias_beta, constraints (the same terms for every non-blank line), format
// and alignments. The server checks every value and answers a 422 naming the field.
function steering(lines) {
  const fields = {};
  const prefixes = splitLines($("prefix").value);
  if (prefixes.some((p) => p.trim() !== "")) {
    const last = prefixes.map((p) => p.trim() !== "").lastIndexOf(true);
    if (last >= lines.length) {
      throw new Error(`target prefix: line ${last + 1} has a prefix but the source has ` +
                      `${lines.length} line(s)`);
    }
    fields.target_prefix = lines.map((_, i) => (prefixes[i] || "").trim() || null);
  }
  if ($("prefix-bias").value !== "") fields.prefix_bias_beta = Number($("prefix-bias").value);
  const terms = splitLines($("terms").value).map((t) => t.trim()).filter((t) => t !== "");
  if (terms.length) fields.constraints = lines.map((line) => (line.trim() ? terms : null));
  if ($("html").checked) fields.format = "html";
  if ($("align").checked) fields.alignments = true;
  return fields;
}

// Per line: its score and Moses i-j alignment (source word i - output word j).
function showDetails(hypotheses) {
  const list = $("details");
  list.replaceChildren(...hypotheses.map((h) => {
    const item = document.createElement("li");
    if (h === null || typeof h === "string") {
      item.textContent = "blank";
      return item;
    }
    item.dataset.score = h.score;
    item.dataset.alignment = h.alignment ?? "";
    const code = document.createElement("code");
    code.textContent = h.alignment ?? "";
    item.append(`score ${h.score.toFixed(3)}${h.finished ? "" : " (cut at max_len)"} · `, code);
    return item;
  }));
  list.hidden = hypotheses.length === 0;
}

// ------------------------------------------------------------------ translation
async function translate() {
  const text = $("source").value;
  const method = $("method").value;
  const request = { q: text, method };
  if (method === "beam") request.beam_size = Number($("beam-size").value);
  if (method === "sample" && $("seed").value !== "") request.seed = Number($("seed").value);
  const button = $("translate");
  button.disabled = true;
  $("error").hidden = true;
  $("details").hidden = true;
  const started = performance.now();
  try {
    const lines = splitLines(text);
    const steer = steering(lines);
    // A text per line when a field goes with lines; HTML alone stays one text (tags span lines).
    const perLine = Object.keys(steer).some((k) => k !== "format");
    Object.assign(request, steer, perLine ? { q: lines } : {});
    if ($("stream").checked) {
      await translateStreaming(text, request, started);
    } else {
      const data = await api("/v1/translate", request);
      const best = data.translations.map((t) => (Array.isArray(t) ? t[0] : t));
      $("result").textContent = best.map((h) => (typeof h === "string" ? h : h.text)).join("\n");
      if (request.alignments) showDetails(best);
      const ms = Math.round(performance.now() - started);
      $("meta").textContent = `${ms} ms` + (data.seed !== undefined ? ` · seed ${data.seed}` : "");
    }
    state.lines = splitLines(text).filter((line) => line.trim() !== "");
    fillSelect($("att-line"), state.lines.map((line, i) =>
      [i, line.length > 60 ? line.slice(0, 57) + "…" : line]));
    if (state.lines.length) await showAttention(state.lines[0]);
    else $("attention").hidden = true;
  } catch (e) {
    showError(e);
  } finally {
    button.disabled = false;
  }
}

// ------------------------------------------------------------------ streaming
// Each non-blank line streams on its own (a line samples with the seed as line 0 does).
async function translateStreaming(text, request, started) {
  const lines = splitLines(text);
  const shown = lines.map(() => "");
  let first = null, seed;
  const meta = $("meta");
  meta.textContent = "streaming…";
  for (const [i, line] of lines.entries()) {
    if (line.trim() === "") continue;
    const done = await streamLine({ ...request, q: line }, (partial) => {
      shown[i] = partial;
      $("result").textContent = shown.join("\n");
      first = first ?? performance.now();
    });
    shown[i] = done.translation;
    seed = done.seed;
  }
  $("result").textContent = shown.join("\n");
  const ms = (t) => Math.round(t - started);
  meta.textContent = (first !== null ? `first text ${ms(first)} ms · ` : "") +
    `${ms(performance.now())} ms streamed` + (seed !== undefined ? ` · seed ${seed}` : "");
}

// Server-sent events of one line: {"text": added} or {"best": so far}, then "done".
async function streamLine(request, show) {
  const response = await fetch("/v1/translate/stream", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(request),
  });
  if (!response.ok) {
    let data = null;
    try { data = await response.json(); } catch (e) { /* not JSON */ }
    throw new Error(`${response.status}: ${data && data.error ? data.error.message : response.statusText}`);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "", text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the stream ended before its done event");
    buffer += value;
    for (let cut = buffer.indexOf("\n\n"); cut >= 0; cut = buffer.indexOf("\n\n")) {
      const event = parseEvent(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 2);
      if (event.name === "error") throw new Error(`${event.data.error.code}: ${event.data.error.message}`);
      if (event.name === "done") return event.data;
      text = event.data.text !== undefined ? text + event.data.text : event.data.best;
      show(text);
    }
  }
}

function parseEvent(block) {
  let name = "message", data = null;
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) name = line.slice(7);
    else if (line.startsWith("data: ")) data = JSON.parse(line.slice(6));
  }
  return { name, data };
}

function showError(e) {
  const box = $("error");
  box.textContent = e.message;
  box.hidden = false;
}

function fillSelect(select, options) {
  select.replaceChildren(...options.map(([value, label]) => {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = label;
    return option;
  }));
}

// ------------------------------------------------------------------ attention
async function showAttention(line) {
  try {
    const data = await api("/v1/attention", { q: line });
    state.attention = data;
    const layers = data.cross_attention.length, heads = data.cross_attention[0].length;
    const keep = (select) => select.value;
    const layer = keep($("att-layer")), head = keep($("att-head"));
    fillSelect($("att-layer"), [["mean", "mean of layers"]].concat(
      [...Array(layers).keys()].map((i) => [i, `layer ${i + 1}`])));
    fillSelect($("att-head"), [["mean", "mean of heads"]].concat(
      [...Array(heads).keys()].map((h) => [h, `head ${h + 1}`])));
    if (layer !== "" && Number(layer) < layers) $("att-layer").value = layer;
    else $("att-layer").value = layers - 1;  // the last layer by default
    if (head !== "" && Number(head) < heads) $("att-head").value = head;
    $("attention").hidden = false;
    drawHeatmap();
  } catch (e) {
    showError(e);
  }
}

// Weights [target][source] for the chosen layer and head (or their means).
function selectedWeights() {
  const cross = state.attention.cross_attention;  // [layer][head][target][source]
  const layerChoice = $("att-layer").value, headChoice = $("att-head").value;
  const layers = layerChoice === "mean" ? cross : [cross[Number(layerChoice)]];
  const maps = [];
  for (const layer of layers) {
    if (headChoice === "mean") maps.push(...layer); else maps.push(layer[Number(headChoice)]);
  }
  return maps[0].map((row, t) => row.map((_, s) =>
    maps.reduce((sum, m) => sum + m[t][s], 0) / maps.length));
}

// Viridis, sampled at 5 stops and interpolated linearly.
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function color(w) {
  const x = Math.min(1, Math.max(0, w)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x)), f = x - i;
  const c = VIRIDIS[i].map((v, k) => Math.round(v + f * (VIRIDIS[i + 1][k] - v)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function svgElement(name, attributes, text) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  if (text !== undefined) element.textContent = text;
  return element;
}

function drawHeatmap() {
  const { source, target } = state.attention;
  const weights = selectedWeights();
  const cell = 24, charWidth = 7.6;
  const left = 12 + charWidth * Math.max(...target.map((p) => p.length));
  const top = 12 + 0.75 * charWidth * Math.max(...source.map((p) => p.length));
  const svg = $("heatmap");
  const width = left + cell * source.length + 70, height = top + cell * target.length + 10;
  svg.replaceChildren();
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.dataset.rows = target.length;
  svg.dataset.cols = source.length;
  source.forEach((piece, s) => {
    const x = left + s * cell + cell / 2, y = top - 6;
    svg.append(svgElement("text", { class: "col-label", x, y, "text-anchor": "start",
      transform: `rotate(-50 ${x} ${y})` }, piece));
  });
  target.forEach((piece, t) => {
    svg.append(svgElement("text", { class: "row-label", x: left - 6,
      y: top + t * cell + cell / 2 + 4, "text-anchor": "end" }, piece));
    source.forEach((sourcePiece, s) => {
      const w = weights[t][s];
      const rect = svgElement("rect", { class: "cell", x: left + s * cell, y: top + t * cell,
        width: cell - 1, height: cell - 1, fill: color(w), "data-row": t, "data-col": s,
        "data-weight": w.toFixed(5) });
      rect.append(svgElement("title", {}, `${piece} ← ${sourcePiece}: ${w.toFixed(3)}`));
      svg.append(rect);
    });
  });
  drawLegend(svg, left + cell * source.length + 16, top, Math.min(160, cell * target.length));
}

function drawLegend(svg, x, y, height) {
  const steps = 20;
  for (let i = 0; i < steps; i++) {
    svg.append(svgElement("rect", { x, y: y + (i * height) / steps, width: 12,
      height: height / steps + 0.5, fill: color(1 - i / (steps - 1)) }));
  }
  svg.append(svgElement("text", { x: x + 16, y: y + 10 }, "1"));
  svg.append(svgElement("text", { x: x + 16, y: y + height }, "0"));
}

// ------------------------------------------------------------------ wiring
$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !$("translate").disabled) {
    event.preventDefault();
    translate();
  }
});
$("method").addEventListener("change", () => {
  $("beam-size").disabled = $("method").value !== "beam";
  $("seed-label").hidden = $("method").value !== "sample";
});
$("att-line").addEventListener("change", () => showAttention(state.lines[Number($("att-line").value)]));
$("att-layer").addEventListener("change", drawHeatmap);
$("att-head").addEventListener("change", drawHeatmap);
waitUntilReady();
