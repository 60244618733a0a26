// A small page on Pipecat's own JavaScript client, bundled with esbuild for headless Chromium
// (tests/server/test_rtvi_browser.py): the microphone is Chromium's fake device (a WAV file),
// bot audio plays through the client's WavMediaManager (and is metered on its way in), and every
// client event lands in window.__events (the speaking events with the bot samples received so far,
// to show where a barge-in cut the bot).  A UI command (open_confirm) is answered at once with
// the app event confirm_answered, then the page types "thanks" (send-text).
import { PipecatClient } from "@pipecat-ai/client-js";
import { WavMediaManager, WebSocketTransport } from "@pipecat-ai/websocket-transport";

const events = [];
window.__events = events;
const log = (event, data) => events.push({ event, data, at: performance.now() });

class MeteredWavMediaManager extends WavMediaManager {
  constructor(...args) {
    super(...args);
    window.__bot = { peak: 0, samples: 0 };
  }
  bufferBotAudio(data, id) {
    for (const s of data) window.__bot.peak = Math.max(window.__bot.peak, Math.abs(s));
    window.__bot.samples += data.length;
    return super.bufferBotAudio(data, id);
  }
}

const client = new PipecatClient({
  transport: new WebSocketTransport({ mediaManager: new MeteredWavMediaManager(512, 16000) }),
  enableMic: true,
  enableCam: false,
  callbacks: {
    onBotReady: (d) => log("botReady", d),
    onUserTranscript: (d) => log("userTranscript", d),
    onBotLlmText: (d) => log("botLlmText", d),
    onBotStartedSpeaking: () => log("botStartedSpeaking", { samples: window.__bot.samples }),
    onBotStoppedSpeaking: () => log("botStoppedSpeaking", { samples: window.__bot.samples }),
    onUserStartedSpeaking: () => log("userStartedSpeaking", { samples: window.__bot.samples }),
    onUserStoppedSpeaking: () => log("userStoppedSpeaking"),
    onError: (m) => log("error", m && m.data),
    onDisconnected: () => log("disconnected"),
    onUICommand: (d) => {
      log("uiCommand", d);
      if (d.command === "open_confirm") {
        client.sendUIEvent("confirm_answered", { nonce: d.payload.nonce, answer: "yes" });
        setTimeout(() => client.sendText("thanks"), 500);
      }
    },
  },
});

client.connect({ wsUrl: `ws://${location.host}/rtvi` })
  .then(() => log("connected"))
  .catch((e) => log("fatal", String((e && e.stack) || e)));
