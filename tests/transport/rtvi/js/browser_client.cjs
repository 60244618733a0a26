// Headless Chromium (Debian's, through playwright-core: no browser download) on the page of
// page/app.js: a fake microphone fed from a WAV file, autoplay allowed.
// usage: node browser_client.cjs <page url> <mic.wav> <seconds> <chromium>
// prints one JSON line: {"events": [...], "bot": {"peak", "samples"}} (or {"fatal": ...})
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

async function main() {
  const [url, wav, seconds, executablePath] = process.argv.slice(2);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "brisvox-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream",
      "--use-fake-device-for-media-stream", `--use-file-for-fake-audio-capture=${wav}%noloop`,
      "--autoplay-policy=no-user-gesture-required",
    ],
  });
  try {
    const page = context.pages()[0] || (await context.newPage());
    const logs = [];
    page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`.slice(0, 300)));
    page.on("pageerror", (e) => logs.push(`pageerror: ${e}`.slice(0, 300)));
    await page.goto(url);
    await page.waitForTimeout(Number(seconds) * 1000);
    const result = await page.evaluate(() => ({ events: window.__events, bot: window.__bot }));
    result.logs = logs.slice(-30);
    process.stdout.write(JSON.stringify(result) + "\n");
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => { process.stdout.write(JSON.stringify({ fatal: String((e && e.stack) || e) }) + "\n"); process.exit(1); });
