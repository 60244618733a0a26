// Pipecat's own JavaScript client (@pipecat-ai/client-js + @pipecat-ai/websocket-transport) in Node 20,
// with the shims TESTING.md names: a `window` global, a `ws`-based WebSocket that delivers Blobs, and a
// hand-made media manager (a WAV file as the microphone, bot audio recorded instead of played).
// usage: node rtvi_client.cjs <ws url> <mic.wav: PCM16 mono 16 kHz> <seconds>
// prints one JSON line per client event, then {"done": ...}
"use strict";
const fs = require("fs");
const WS = require("ws");

globalThis.window = globalThis;
if (typeof globalThis.navigator === "undefined") globalThis.navigator = { userAgent: "node" };

class BlobWebSocket extends WS {
  constructor(url, protocols) {
    super(url, protocols);
    super.binaryType = "arraybuffer";
  }
  set binaryType(_) {}  // the client's setting is ignored: this shim always delivers Blobs
  get binaryType() { return "blob"; }
  addEventListener(type, listener, options) {
    if (type !== "message") return super.addEventListener(type, listener, options);
    return super.addEventListener("message", (ev) => {
      const data = ev.data instanceof ArrayBuffer ? new Blob([ev.data]) : ev.data;
      listener({ data, type: "message", target: this });
    }, options);
  }
}
globalThis.WebSocket = BlobWebSocket;

const { PipecatClient } = require("@pipecat-ai/client-js");
const { WebSocketTransport } = require("@pipecat-ai/websocket-transport");

function readWav(path) {
  const buf = fs.readFileSync(path);
  let off = 12;
  while (off < buf.length) {
    const id = buf.toString("ascii", off, off + 4);
    const size = buf.readUInt32LE(off + 4);
    if (id === "data") return buf.subarray(off + 8, off + 8 + size);
    off += 8 + size;
  }
  throw new Error("no data chunk in " + path);
}

class WavMicMediaManager {
  constructor(pcm, chunkSamples) {
    this._pcm = pcm;
    this._chunk = chunkSamples * 2;
    this._callbacks = {};
    this._micEnabled = true;
    this.botPeak = 0;
    this.botSamples = 0;
  }
  setUserAudioCallback(cb) { this._userAudioCallback = cb; }
  setClientOptions(options) { this._options = options; this._callbacks = options.callbacks || {}; }
  async initialize() {}
  async connect() {
    let pos = 0;
    const started = Date.now();
    // real time: the chunk due at each tick (the WAV, then silence)
    this._timer = setInterval(() => {
      const due = Math.floor(((Date.now() - started) / 1000) * 16000) * 2;
      while (pos + this._chunk <= due) {
        const piece = pos + this._chunk <= this._pcm.length ? this._pcm.subarray(pos, pos + this._chunk)
          : Buffer.alloc(this._chunk);
        const copy = new Uint8Array(piece).buffer;
        this._userAudioCallback(copy);
        pos += this._chunk;
      }
    }, 10);
  }
  async disconnect() { clearInterval(this._timer); }
  userStartedSpeaking() { emit({ media: "interrupt" }); }
  bufferBotAudio(int16) {
    for (const s of int16) this.botPeak = Math.max(this.botPeak, Math.abs(s));
    this.botSamples += int16.length;
  }
  async getAllMics() { return []; }
  async getAllCams() { return []; }
  async getAllSpeakers() { return []; }
  updateMic() {}
  updateCam() {}
  updateSpeaker() {}
  get selectedMic() { return {}; }
  get selectedCam() { return {}; }
  get selectedSpeaker() { return {}; }
  enableMic(enable) { this._micEnabled = enable; }
  enableCam() {}
  enableScreenShare() {}
  get isMicEnabled() { return this._micEnabled; }
  get isCamEnabled() { return false; }
  get isSharingScreen() { return false; }
  get supportsScreenShare() { return false; }
  tracks() { return { local: {} }; }
}

function emit(obj) { process.stdout.write(JSON.stringify(obj) + "\n"); }

async function main() {
  const [url, wav, seconds] = process.argv.slice(2);
  const media = new WavMicMediaManager(readWav(wav), 512);
  const transport = new WebSocketTransport({ mediaManager: media });
  const client = new PipecatClient({
    transport,
    enableMic: true,
    enableCam: false,
    callbacks: {
      onBotReady: (data) => emit({ event: "botReady", data }),
      onUserTranscript: (data) => emit({ event: "userTranscript", data }),
      onBotLlmText: (data) => emit({ event: "botLlmText", data }),
      onBotTtsText: (data) => emit({ event: "botTtsText", data }),
      onBotStartedSpeaking: () => emit({ event: "botStartedSpeaking" }),
      onBotStoppedSpeaking: () => emit({ event: "botStoppedSpeaking" }),
      onUserStartedSpeaking: () => emit({ event: "userStartedSpeaking" }),
      onUserStoppedSpeaking: () => emit({ event: "userStoppedSpeaking" }),
      onMetrics: (data) => emit({ event: "metrics", data }),
      onServerMessage: (data) => emit({ event: "serverMessage", data }),
      onError: (msg) => emit({ event: "error", data: msg && msg.data }),
      onDisconnected: () => emit({ event: "disconnected" }),
    },
  });
  await client.connect({ wsUrl: url });
  await new Promise((r) => setTimeout(r, Number(seconds) * 1000));
  emit({ done: true, botPeak: media.botPeak, botSamples: media.botSamples });
  await client.disconnect();
  process.exit(0);
}

main().catch((e) => { emit({ fatal: String(e && e.stack || e) }); process.exit(1); });
