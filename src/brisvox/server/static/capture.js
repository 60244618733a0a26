// AudioWorklet: the microphone at the context's rate (16 kHz), as PCM16 frames of 20 ms.
class Capture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.frame = Math.round(sampleRate / 50);
    this.buf = new Int16Array(this.frame);
    this.n = 0;
  }
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (!ch) return true;
    let peak = 0;
    for (let i = 0; i < ch.length; i++) {
      const s = Math.max(-1, Math.min(1, ch[i]));
      peak = Math.max(peak, Math.abs(s));
      this.buf[this.n++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.n === this.frame) {
        this.port.postMessage({ pcm: this.buf.buffer, peak }, [this.buf.buffer]);
        this.buf = new Int16Array(this.frame);
        this.n = 0;
        peak = 0;
      }
    }
    return true;
  }
}
registerProcessor("brisvox-capture", Capture);
