// First load of the built page in headless Chromium, with an empty cache each time: the first
// contentful paint, the time until the wasm has started and picked a backend (the status says
// "loading the models' weights..." or the body is data-state=ready), the time until the page
// is ready (weights in), and the bytes the server sent, by kind. Usage:
//   node first_load.cjs BASE_URL [RUNS] [MBIT]   prints one JSON object (medians over RUNS,
//   default 3); with MBIT, the network is throttled to MBIT Mbit/s down and 40 ms latency
//   (Chromium's network emulation), as a visitor's connection would be.
'use strict';
const { chromium } = require('playwright-core');

const [base, runsArg, mbitArg] = process.argv.slice(2);
const RUNS = Number(runsArg || 3);
const MBIT = mbitArg ? Number(mbitArg) : null;
const ARGS = [
  '--enable-unsafe-webgpu',
  '--use-webgpu-adapter=swiftshader',
  '--enable-unsafe-swiftshader',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

function median(v) {
  const s = [...v].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function once(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  if (MBIT) {
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable');
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false, latency: 40, downloadThroughput: (MBIT * 1e6) / 8, uploadThroughput: (MBIT * 1e6) / 8,
    });
  }
  const bytes = { wasm: 0, js: 0, html: 0, weights: 0, other: 0 };
  page.on('response', async (r) => {
    try {
      const n = (await r.body()).length;
      const url = r.url();
      const kind = url.endsWith('.wasm') ? 'wasm' : url.endsWith('.js') ? 'js'
        : url.endsWith('.safetensors') ? 'weights' : url.endsWith('/') || url.includes('.html') || url.includes('?') ? 'html' : 'other';
      bytes[kind] += n;
    } catch (_) { /* redirects have no body */ }
  });
  await page.goto(`${base}/`);
  await page.waitForFunction(
    () => document.body.dataset.state === 'ready' ||
      /weights/.test(document.getElementById('status').textContent),
    null, { polling: 10, timeout: 300000 });
  const started = await page.evaluate(() => performance.now());
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null,
    { polling: 10, timeout: 300000 });
  const ready = await page.evaluate(() => performance.now());
  const fcp = await page.evaluate(() =>
    (performance.getEntriesByName('first-contentful-paint')[0] || { startTime: NaN }).startTime);
  await context.close();
  return { fcp, started, ready, bytes };
}

(async () => {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
  const runs = [];
  for (let i = 0; i < RUNS; i++) runs.push(await once(browser));
  await browser.close();
  const out = {
    runs: RUNS,
    mbit: MBIT,
    first_contentful_paint_ms: Math.round(median(runs.map((r) => r.fcp))),
    wasm_started_ms: Math.round(median(runs.map((r) => r.started))),
    ready_ms: Math.round(median(runs.map((r) => r.ready))),
    spread_ready_ms: [Math.round(Math.min(...runs.map((r) => r.ready))), Math.round(Math.max(...runs.map((r) => r.ready)))],
    bytes: runs[0].bytes,
  };
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
