// The call timeline's waterfall (docs/OBSERVABILITY.md), drawn from /api/calls/<id>: one row per
// turn (turn detection, LLM first token, first audio, playing, cut) and for the greeting, one row per
// tool call, on each turn's own axis. Shared by the /calls/<id> page and the demo page.
"use strict";
(() => {
  const NS = "http://www.w3.org/2000/svg";
  const ROW = 22, LABEL = 190, SPAN = 4.0; // seconds drawn after each turn's reference point

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const ms = (s) => (s === null ? "-" : `${Math.round(s * 1000)} ms`);

  function draw(svg, call) {
    const width = Number(svg.getAttribute("width")) || 960;
    const scale = (width - LABEL - 10) / SPAN;
    // kind: the bar's class next to "bar" (detection, token, audio, playing, cut, tool), for tests and styles
    const bar = (y, from, to, color, title, t0, kind) => {
      if (from === null || to === null) return;
      const x = LABEL + Math.max(0, from - t0) * scale;
      const w = Math.max(2, Math.min(width - 10 - x, (to - from) * scale));
      const r = el("rect", { x, y, width: w, height: ROW - 8, fill: color, class: `bar ${kind}` });
      r.appendChild(el("title", {}, title));
      svg.appendChild(r);
    };
    svg.replaceChildren();
    const rows = call.turn_rows;
    let y = 4;
    for (let i = 0; i < rows.length; i++) {
      const t = rows[i], next = rows[i + 1];
      const t0 = t.speech_ended ?? t.ended ?? t.started;
      const first = t.rounds.find((r) => r.first_token !== null);
      const token = first ? first.first_token : null;
      const over = Object.entries(t.stages).some(([k, v]) => v !== null && call.budget[k] !== undefined && v > call.budget[k]);
      // voice to voice when the caller spoke; a typed or late-transcript turn counts from its end
      const total = t.stages.voice_to_voice !== null ? ms(t.stages.voice_to_voice) :
                    t.stages.turn_end_to_audio !== null ? `${ms(t.stages.turn_end_to_audio)} from turn end` : "no reply";
      // The caller cut the reply when the next turn began (a barge-in); the heard report (t.cut) comes later.
      const cutAt = t.cut === null ? null : (next && next.barge_in ? Math.min(next.started, t.cut) : t.cut);
      const label = t.greeting ? `greeting: ${cutAt !== null ? "cut by the caller" : t.first_audio !== null ? "played" : "not heard"}`
                               : `turn ${t.epoch}${t.barge_in ? " (barge-in)" : ""}: ${total}`;
      svg.appendChild(el("text", { x: 4, y: y + 11, class: over ? "over turn-label" : "turn-label" }, label));
      bar(y, t.speech_ended, t.ended, "#8e9aaf", `turn detection ${ms(t.stages.turn_detection)} (${t.reason ?? "open"})`, t0, "detection");
      bar(y, t.ended, token, "#e0a458", `LLM first token ${ms(t.stages.llm_first_token)}`, t0, "token");
      // the greeting has no LLM round: its first audio counts from its text
      bar(y, t.greeting ? t.started : token, t.first_audio, "#6a994e", `first audio ${ms(t.stages.first_audio)}`, t0, "audio");
      const playEnd = cutAt ?? (next ? next.started : (call.live ? null : call.duration));
      bar(y, t.first_audio, playEnd, "#bcd4e6", cutAt !== null ? "played until cut" : "played", t0, "playing");
      if (cutAt !== null) bar(y, cutAt, cutAt + 0.02, "#e63946", "cut by the caller", t0, "cut");
      y += ROW;
      for (const tool of t.tools) {
        svg.appendChild(el("text", { x: 16, y: y + 11, class: "tool-label" }, `${tool.name} (${tool.outcome ?? "running"})`));
        bar(y, tool.started, tool.settled ?? tool.started + 0.02, "#7b2cbf", `${tool.name}: ${tool.outcome ?? "running"}`, t0, "tool");
        y += ROW;
      }
    }
    svg.setAttribute("height", Math.max(40, y + 4));
  }

  function describe(call) {
    const state = call.live ? "live" : `ended (${call.outcome}) after ${call.duration} s`;
    return `${call.transport} call, started ${call.started}, ${state}, ${call.turns} turns; ` +
      `budget: turn detection ${ms(call.budget.turn_detection)}, first token ${ms(call.budget.llm_first_token)}, ` +
      `first audio ${ms(call.budget.first_audio)}`;
  }

  const LEGEND = [["#8e9aaf", "turn detection"], ["#e0a458", "LLM first token"], ["#6a994e", "first audio"],
                  ["#bcd4e6", "playing"], ["#e63946", "cut"], ["#7b2cbf", "tool call"]];

  function legend(div) {
    div.replaceChildren(...LEGEND.map(([color, name]) => {
      const span = document.createElement("span");
      const i = document.createElement("i");
      i.style.background = color;
      span.append(i, name);
      return span;
    }));
  }

  window.brisvoxWaterfall = { draw, describe, legend };
})();
