// The brisvox demo page: one call over WebRTC (WHIP at /whip, docs/WEBRTC.md), or over the generic
// WebSocket protocol (docs/WEBSOCKET_PROTOCOL.md) when WebRTC is unavailable or ?transport=ws.
"use strict";
const RATE = 16000;
const LEAD = 0.06; // seconds of playout lead that absorb network jitter
const params = new URLSearchParams(location.search);
const raw = params.get("raw") === "1"; // no echo cancellation, noise suppression or gain control
// A token for a server that requires one: in the fragment (#token=...), which the browser never sends.
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const WHIP = "/whip";
const CONNECT_WAIT_MS = 10000; // a WebRTC call not connected by then falls back to the WebSocket
let pc = null, whipLocation = null, via = null; // via: "WebRTC" or "WebSocket" while a call is up
const $ = (id) => document.getElementById(id);
const logEl = $("log");
let ws = null, ctx = null, stream = null, node = null;
let playhead = 0, sources = [], markTimers = [], started = false;
let userEl = null, userFinal = "";
const bots = new Map(); // epoch -> {el, text, done}
const tools = new Map(); // call id -> element

fetch("/agent.json", token ? { headers: { Authorization: `Bearer ${token}` } } : {}).then((r) => r.json()).then((a) => {
  $("agent-name").textContent = a.agent;
  $("agent").textContent = `LLM: ${a.llm} · VAD: ${a.vad} · STT: ${a.stt} · TTS: ${a.tts}`;
}).catch(() => { $("agent").textContent = "agent info unavailable"; });

$("talk").addEventListener("click", () => (ws || pc ? hangUp() : call()));

function status(text) { $("status").textContent = text; }
function scroll() { window.scrollTo(0, document.body.scrollHeight); }
function add(cls, text) {
  const el = document.createElement("div");
  el.className = cls;
  el.textContent = text;
  logEl.appendChild(el);
  scroll();
  return el;
}

function authHeaders() { return token ? { Authorization: `Bearer ${token}` } : {}; }

async function call() {
  $("talk").disabled = true;
  try {
    ctx = new AudioContext({ sampleRate: RATE });
    await ctx.audioWorklet.addModule("/static/capture.js");
    const constraints = raw
      ? { echoCancellation: false, noiseSuppression: false, autoGainControl: false }
      : { echoCancellation: true, noiseSuppression: true, autoGainControl: true };
    stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, ...constraints } });
  } catch (err) {
    status(`microphone unavailable: ${err}`);
    $("talk").disabled = false;
    return;
  }
  if (params.get("transport") !== "ws" && window.RTCPeerConnection) {
    const why = await webrtcCall();
    if (why === null) return;
    add("note", `WebRTC unavailable (${why}): calling over the WebSocket`);
  }
  wsCall();
}

// WebRTC: the microphone as an Opus track, the bot's audio on an <audio> element (the browser's
// jitter buffer and echo cancellation), the engine's events on a data channel.  null: the call is up.
async function webrtcCall() {
  status("connecting over WebRTC…");
  try {
    let iceServers = [];
    const ice = await fetch(`${WHIP}/ice`, { headers: authHeaders() });
    if (ice.status === 404) return "the server has no WebRTC endpoint";
    if (ice.ok) iceServers = (await ice.json()).iceServers;
    pc = new RTCPeerConnection({ iceServers });
    pc.addTrack(stream.getAudioTracks()[0], stream);
    const events = pc.createDataChannel("events");
    events.onmessage = (m) => onMessage(JSON.parse(m.data));
    pc.ontrack = (ev) => {
      const el = $("remote") || document.body.appendChild(Object.assign(document.createElement("audio"), { id: "remote", autoplay: true }));
      el.srcObject = new MediaStream([ev.track]);
    };
    meterFrom(stream);
    const up = new Promise((resolve) => {
      pc.onconnectionstatechange = () => {
        const state = pc ? pc.connectionState : "closed";
        if (state === "connected") resolve(true);
        if (state === "failed" || state === "closed") resolve(false);
        if (via === "WebRTC" && (state === "failed" || state === "closed" || state === "disconnected")) {
          status(`call ended (${state})`);
          teardown();
        }
      };
      setTimeout(() => resolve(false), CONNECT_WAIT_MS);
    });
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise((done) => {
      if (pc.iceGatheringState === "complete") return done();
      pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === "complete") done(); };
      setTimeout(done, 2000); // enough candidates by then; the answer does not wait for the rest
    });
    const res = await fetch(WHIP, { method: "POST", headers: { "Content-Type": "application/sdp", ...authHeaders() },
                                    body: pc.localDescription.sdp });
    if (res.status !== 201) { closePeer(); return `the offer got ${res.status}: ${(await res.text()).trim()}`; }
    whipLocation = res.headers.get("Location");
    await pc.setRemoteDescription({ type: "answer", sdp: await res.text() });
    if (!(await up)) { hangUpPeer(); return "not connected within 10 s (UDP blocked? see docs/WEBRTC.md)"; }
  } catch (err) {
    closePeer();
    return String(err);
  }
  via = "WebRTC";
  onMessage({ type: "started", call_id: decodeURIComponent(whipLocation.split("/").pop()) });
  return null;
}

function meterFrom(micStream) {
  const analyser = ctx.createAnalyser();
  analyser.fftSize = 512;
  ctx.createMediaStreamSource(micStream).connect(analyser);
  const buf = new Float32Array(analyser.fftSize);
  const tick = () => {
    if (!pc) return;
    analyser.getFloatTimeDomainData(buf);
    let peak = 0;
    for (const v of buf) peak = Math.max(peak, Math.abs(v));
    $("meter").firstElementChild.style.width = `${Math.min(100, peak * 150)}%`;
    requestAnimationFrame(tick);
  };
  tick();
}

function hangUpPeer() {
  if (whipLocation) fetch(whipLocation, { method: "DELETE", headers: authHeaders() }).catch(() => {});
  whipLocation = null;
  closePeer();
}

function closePeer() {
  if (pc) pc.close();
  pc = null;
}

function wsCall() {
  via = "WebSocket";
  const source = ctx.createMediaStreamSource(stream);
  node = new AudioWorkletNode(ctx, "brisvox-capture");
  source.connect(node);
  node.connect(ctx.destination); // the worklet writes silence; the connection keeps it running
  node.port.onmessage = (e) => {
    $("meter").firstElementChild.style.width = `${Math.min(100, e.data.peak * 150)}%`;
    if (started && ws && ws.readyState === WebSocket.OPEN) ws.send(e.data.pcm);
  };
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  // Browsers cannot set headers on a WebSocket: the token travels as a subprotocol.
  ws = new WebSocket(`${scheme}://${location.host}/ws`, token ? ["brisvox", `brisvox.token.${token}`] : []);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => ws.send(JSON.stringify({ type: "start", encoding: "pcm16", sample_rate: RATE }));
  ws.onmessage = (m) => (typeof m.data === "string" ? onMessage(JSON.parse(m.data)) : play(m.data));
  ws.onclose = (e) => { status(`call ended (close ${e.code})`); teardown(); };
  ws.onerror = () => status("connection error");
  status("connecting…");
}

function hangUp() {
  if (pc) { hangUpPeer(); status("call ended"); teardown(); return; }
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "stop" }));
  else teardown();
}

function teardown() {
  started = false;
  clearPlayout();
  if (stream) stream.getTracks().forEach((t) => t.stop());
  if (ctx) ctx.close();
  closePeer();
  ws = ctx = stream = node = via = null;
  $("talk").textContent = "Talk";
  $("talk").classList.remove("live");
  $("talk").disabled = false;
}

function play(buffer) {
  if (!ctx) return;
  const pcm = new Int16Array(buffer);
  const samples = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
  const audio = ctx.createBuffer(1, samples.length, RATE);
  audio.copyToChannel(samples, 0);
  const src = ctx.createBufferSource();
  src.buffer = audio;
  src.connect(ctx.destination);
  const at = Math.max(ctx.currentTime + LEAD, playhead);
  src.start(at);
  playhead = at + audio.duration;
  sources.push(src);
  src.onended = () => { sources = sources.filter((s) => s !== src); };
}

function clearPlayout() {
  for (const s of sources) { try { s.stop(); } catch (_) { /* already stopped */ } }
  sources = [];
  markTimers.forEach(clearTimeout);
  markTimers = [];
  playhead = ctx ? ctx.currentTime : 0;
}

function onMessage(msg) {
  switch (msg.type) {
    case "started":
      started = true;
      status(`in call over ${via} ${msg.call_id.slice(0, 12)}: speak now`);
      showTimeline(msg.call_id);
      $("talk").textContent = "Hang up";
      $("talk").classList.add("live");
      $("talk").disabled = false;
      break;
    case "clear":
      clearPlayout();
      break;
    case "mark": {
      const delay = ctx ? Math.max(0, playhead - ctx.currentTime) : 0;
      markTimers.push(setTimeout(() => {
        if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "mark", id: msg.id }));
      }, delay * 1000));
      break;
    }
    case "stop":
      status(`call over: ${msg.reason}`);
      break;
    case "error":
      add("note", `server error ${msg.code}: ${msg.message}`);
      break;
    case "event":
      onEvent(msg);
      break;
  }
}

function userBubble() {
  if (!userEl) { userEl = add("msg user interim", ""); userFinal = ""; }
  return userEl;
}

function bot(epoch) {
  let b = bots.get(epoch);
  if (!b) {
    b = { el: add("msg bot", ""), done: false, body: document.createElement("span"), rounds: new Map() };
    b.el.appendChild(b.body);
    bots.set(epoch, b);
  }
  return b;
}

// One span per reply round, so that a cut round can show what the caller heard of it.
function botRound(b, round) {
  let r = b.rounds.get(round);
  if (!r) {
    r = { text: "", span: document.createElement("span") };
    b.body.appendChild(r.span);
    b.rounds.set(round, r);
  }
  return r;
}

function onEvent(ev) {
  switch (ev.kind) {
    case "call_info":
      $("agent").textContent = `LLM: ${ev.llm} · VAD: ${ev.vad} · STT: ${ev.stt} · TTS: ${ev.tts}`;
      add("note", `agent ${ev.agent}; tools: ${ev.tools.join(", ") || "none"}` +
        (ev.confirm_tools.length ? ` (${ev.confirm_tools.join(", ")} asks for your yes first)` : ""));
      break;
    case "user_transcript": {
      const el = userBubble();
      if (ev.final) { userFinal = (userFinal + " " + ev.text).trim(); el.textContent = userFinal; }
      else el.textContent = (userFinal + " " + ev.text).trim();
      scroll();
      break;
    }
    case "user_turn": {
      const el = userBubble();
      el.textContent = ev.text;
      el.classList.remove("interim");
      userEl = null;
      break;
    }
    case "bot_text": {
      const r = botRound(bot(ev.epoch), ev.round ?? 0);
      r.text += ev.text;
      r.span.textContent = r.text;
      scroll();
      break;
    }
    case "bot_heard": {
      const b = bot(ev.epoch);
      const r = botRound(b, ev.round ?? 0);
      const heard = r.text.startsWith(ev.text) ? ev.text : "";
      r.span.textContent = heard;
      const rest = document.createElement("s");
      rest.className = "unheard";
      rest.title = "not heard: the model does not keep it";
      rest.textContent = r.text.slice(heard.length);
      r.span.appendChild(rest);
      b.el.classList.add("interrupted");
      b.done = true;
      break;
    }
    case "bot_done":
      bot(ev.epoch).done = true;
      break;
    case "tool_call":
      tools.set(ev.id, add("msg tool", `→ ${ev.name}(${ev.arguments})`));
      break;
    case "tool_result": {
      const el = tools.get(ev.id) || add("msg tool", `→ ${ev.name}`);
      el.textContent += `\n← ${ev.outcome}: ${ev.content}`;
      el.style.whiteSpace = "pre-wrap";
      break;
    }
    case "interrupted":
      for (const [epoch, b] of bots) if (epoch < ev.epoch && !b.done) { b.el.classList.add("interrupted"); b.done = true; }
      break;
    case "latency": {
      const b = bot(ev.epoch);
      const span = document.createElement("span");
      span.className = "latency";
      const main = ev.speech_end_to_audio_ms ?? ev.turn_end_to_audio_ms;
      const parts = [];
      if (ev.turn_end_to_audio_ms !== undefined) parts.push(`turn end → audio ${Math.round(ev.turn_end_to_audio_ms)} ms`);
      if (ev.turn_end_to_first_token_ms !== undefined) parts.push(`first token ${Math.round(ev.turn_end_to_first_token_ms)} ms`);
      span.textContent = `latency ${main !== undefined ? Math.round(main) + " ms" : "?"} from end of speech to first audible audio` +
        (parts.length ? ` (${parts.join(", ")})` : "");
      b.el.appendChild(span);
      break;
    }
    case "filler":
      break; // its words come as bot_text like any reply
    case "engine_failure":
      add("note", ev.fatal ? `the call failed (${ev.stage}) and ends` : `a turn failed (${ev.stage}); the bot said its fallback line`);
      break;
  }
}

// The call's waterfall (static/waterfall.js), from the call timeline (/api/calls/<id>): redrawn every
// second while the call is up, and once more after it ended.
let timelineTimer = null;
function showTimeline(callId) {
  clearTimeout(timelineTimer);
  $("timeline").hidden = false;
  $("call-link").href = `/calls/${encodeURIComponent(callId)}`;
  brisvoxWaterfall.legend($("legend"));
  let last = false;
  const refresh = async () => {
    try {
      const r = await fetch(`/api/calls/${encodeURIComponent(callId)}`, { headers: authHeaders() });
      if (r.ok) brisvoxWaterfall.draw($("waterfall"), await r.json());
    } catch (err) { console.warn("the call timeline could not be fetched:", err); } // the next refresh tries again
    if (started) timelineTimer = setTimeout(refresh, 1000);
    else if (!last) { last = true; timelineTimer = setTimeout(refresh, 1000); }
  };
  refresh();
}
