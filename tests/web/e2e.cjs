// End-to-end test of the built page in headless Chromium (playwright-core driving the system's
// /usr/bin/chromium; no browser download). Usage: node e2e.cjs BASE_URL OUT_DIR
// Runs ?autorun=parity on WebGPU, ?autorun=parity&backend=cpu, ?autorun=bench, and
// ?autorun=gru on WebGPU and on the CPU, ?autorun=llm (the transformer demo model on
// `123+456=`) on WebGPU and on the CPU, ?autorun=train&steps=50 (the Train section) on WebGPU and
// on the CPU (50 steps of 4 problems), and the Train section's pause, resume and reset;
// ?autorun=llm&quantize=q4_k (and q8_0) on WebGPU and the CPU (the demo model quantized on load
// writes what `kernels generate --quantize` writes), and a Q4_0 GGUF picked as a directory on both; waits for body[data-state=done], asserts the backend,
// that every parity row passed, that the transformer wrote the right sum with finite tokens/s, that the GRU plot drew finite points and follows a change of
// the initial state, and that the page reported no error; saves a screenshot of each, and
// prints the timings it saw; then the layout at desktop and phone widths (layout-*.png).
'use strict';
const { chromium } = require('playwright-core');
const path = require('path');

const [base, outDir] = process.argv.slice(2);
if (!base || !outDir) {
  console.error('usage: node e2e.cjs BASE_URL OUT_DIR');
  process.exit(2);
}
// The flags of gpu/webdriver.json: SwiftShader WebGPU, and no network (Chromium stalls without).
const ARGS = [
  '--enable-unsafe-webgpu',
  '--use-webgpu-adapter=swiftshader',
  '--enable-unsafe-swiftshader',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];
const TIMEOUT_MS = Number(process.env.WEB_E2E_TIMEOUT_MS || 20 * 60 * 1000);

function ms(text) {
  const m = /([\d.]+)\s*(us|ms)/.exec(text || '');
  if (!m) return 0;
  return m[2] === 'ms' ? Number(m[1]) : Number(m[1]) / 1000;
}

// Opens the page and waits for the body's data-state to be done or error (an autorun's end), or
// ready when `until` is 'ready' (no autorun).
async function open(browser, query, name, until = 'done') {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (e) => console.log(`  [${name}] page error: ${e}`));
  page.on('console', (m) => {
    if (m.type() === 'error') console.log(`  [${name}] console error: ${m.text()}`);
  });
  const t0 = Date.now();
  await page.goto(`${base}/?${query}`);
  await page.waitForFunction(
    (want) => [want, 'error'].includes(document.body.dataset.state),
    until,
    { timeout: TIMEOUT_MS, polling: 500 },
  );
  const seconds = ((Date.now() - t0) / 1000).toFixed(1);
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: true });
  const state = await page.getAttribute('body', 'data-state');
  const backend = (await page.textContent('#backend')).trim();
  const errors = await page.$$eval('#errors li', (li) => li.map((e) => e.textContent));
  const notice = (await page.textContent('#notice')).trim();
  return { page, state, backend, errors, notice, seconds };
}

async function parity(browser, query, name, want) {
  const r = await open(browser, query, name);
  const { page } = r;
  const summary = await page.$eval('#parity-summary', (e) => ({
    passed: Number(e.dataset.passed),
    failed: Number(e.dataset.failed),
  }));
  const rows = await page.$$eval('tr[data-op][data-dir][data-pass]', (trs) =>
    trs.map((tr) => ({
      op: tr.dataset.op,
      dir: tr.dataset.dir,
      pass: tr.dataset.pass,
      cells: [...tr.children].map((td) => td.textContent),
    })),
  );
  const failed = rows.filter((x) => x.pass !== 'true');
  const cpuMs = rows.reduce((a, x) => a + ms(x.cells[6]), 0);
  const gpuMs = rows.reduce((a, x) => a + ms(x.cells[9]), 0);
  const ops = new Set(rows.map((x) => x.op));
  console.log(
    `${name}: backend ${r.backend}, ${rows.length} rows over ${ops.size} ops, ` +
      `${summary.passed} passed, ${summary.failed} failed, page done in ${r.seconds} s; ` +
      `summed op time CPU ${cpuMs.toFixed(1)} ms, WebGPU ${gpuMs.toFixed(1)} ms` +
      (r.notice ? `; notice: ${r.notice}` : ''),
  );
  const problems = [];
  if (r.state !== 'done') problems.push(`body data-state is ${r.state}, not done`);
  if (r.backend !== want) problems.push(`#backend is ${r.backend}, expected ${want}`);
  if (rows.length === 0) problems.push('no parity rows');
  if (summary.failed !== 0 || failed.length !== 0) {
    problems.push(`failed rows:\n    ${failed.map((x) => x.cells.join(' | ')).join('\n    ')}`);
  }
  if (summary.passed !== rows.length) problems.push(`summary says ${summary.passed} passed of ${rows.length}`);
  if (r.errors.length) problems.push(`page errors: ${r.errors.join('; ')}`);
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

async function bench(browser, name) {
  const r = await open(browser, 'autorun=bench', name);
  const rows = await r.page.$$eval('#bench-rows tr', (trs) =>
    trs.map((tr) => [...tr.children].map((td) => td.textContent)),
  );
  console.log(`${name}: backend ${r.backend}, page done in ${r.seconds} s`);
  for (const row of rows) console.log(`  ${row.join(' | ')}`);
  const problems = [];
  if (r.state !== 'done') problems.push(`body data-state is ${r.state}, not done`);
  if (!rows.some((x) => x[2] === 'webgpu')) problems.push('no WebGPU bench rows');
  if (r.errors.length) problems.push(`page errors: ${r.errors.join('; ')}`);
  const svgBars = await r.page.$$eval('#bench-chart rect', (b) => b.length);
  if (svgBars !== rows.length) problems.push(`chart has ${svgBars} bars for ${rows.length} rows`);
  await r.page.close();
  return problems.map((p) => `${name}: ${p}`);
}

async function gru(browser, query, name, want) {
  const r = await open(browser, query, name);
  const { page } = r;
  const got = await page.evaluate(() => {
    const plot = document.getElementById('gru-plot');
    const ms = document.getElementById('gru-rollout-ms');
    const comp = document.getElementById('gru-compression');
    return {
      state: document.getElementById('gru-demo').dataset.state,
      points: Number(plot.dataset.points),
      finite: plot.dataset.finite,
      backend: ms.dataset.backend,
      ms: Number(ms.dataset.ms),
      times: [...document.querySelectorAll('#gru-times tr[data-backend]')].map((tr) => ({
        backend: tr.dataset.backend,
        ms: Number(tr.dataset.ms),
      })),
      rank: Number(comp.dataset.rank),
      ratio: Number(comp.dataset.ratio),
      error: Number(comp.dataset.error),
      readout: comp.textContent,
      status: document.getElementById('gru-status').textContent,
      agreement: document.getElementById('gru-agreement').textContent,
      // Pixels that are not white: the canvas has drawn.
      inked: (() => {
        const d = plot.getContext('2d').getImageData(0, 0, plot.width, plot.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250) n++;
        return n;
      })(),
    };
  });
  const times = got.times.map((t) => `${t.backend} ${t.ms.toFixed(1)} ms`).join(', ');
  console.log(
    `${name}: backend ${r.backend}, section ${got.state}, ${got.points} points, rollout ${times}; ` +
      `${got.status}; ${got.readout}; ${got.agreement} (page done in ${r.seconds} s)`,
  );
  const problems = [];
  if (r.state !== 'done') problems.push(`body data-state is ${r.state}, not done`);
  if (got.state !== 'done') problems.push(`#gru-demo data-state is ${got.state}, not done`);
  if (r.backend !== want) problems.push(`#backend is ${r.backend}, expected ${want}`);
  if (got.backend !== want) problems.push(`#gru-rollout-ms is for ${got.backend}, expected ${want}`);
  if (!(got.points > 0) || got.finite !== 'true') problems.push(`plot: ${got.points} points, finite ${got.finite}`);
  if (got.inked < 1000) problems.push(`the canvas has only ${got.inked} non-white pixels`);
  for (const v of [got.ms, got.ratio, got.error, ...got.times.map((t) => t.ms)]) {
    if (!Number.isFinite(v) || v <= 0) problems.push(`a figure is not a positive finite number: ${v}`);
  }
  if (!(got.rank >= 1)) problems.push(`compression rank ${got.rank}`);
  if (want === 'webgpu' && got.times.length !== 2) problems.push(`expected CPU and WebGPU timings, got ${times}`);
  if (r.errors.length) problems.push(`page errors: ${r.errors.join('; ')}`);
  // The visitor changes the initial state: the plot must follow.
  const before = await page.locator('#gru-plot').screenshot();
  const runs = Number(await page.$eval('#gru-demo', (e) => e.dataset.runs));
  await page.fill('#gru-theta1', '-0.8');
  await page.dispatchEvent('#gru-theta1', 'change');
  await page.waitForFunction(
    (n) => Number(document.getElementById('gru-demo').dataset.runs) > n,
    runs,
    { timeout: TIMEOUT_MS, polling: 250 },
  );
  const after = await page.locator('#gru-plot').screenshot();
  const state2 = await page.$eval('#gru-demo', (e) => e.dataset.state);
  if (state2 !== 'done') problems.push(`after changing theta1 the section is ${state2}`);
  if (Buffer.compare(before, after) === 0) problems.push('the plot did not change with theta1');
  await page.screenshot({ path: path.join(outDir, `${name}-changed.png`), fullPage: true });
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

// The demo model's answer to `aaa+bbb=`: the sum's four digits least-significant first, then `$`.
function sumAnswer(prompt) {
  const [a, b] = prompt.replace('=', '').split('+').map(Number);
  return `${String(a + b).padStart(4, '0').split('').reverse().join('')}$`;
}

// `kernels generate --model native-cli/models/adder --prompt 123+456= --quantize F` prints
// `123+456=9750$` for F = q8_0, q4_0 and q4_k (and without --quantize): the demo model quantized
// on load must write the same on the page.
const CLI_QUANTIZED = { q8_0: '9750$', q4_0: '9750$', q4_k: '9750$' };
// The demo model's f32 weights, 820,000-odd bytes: quantized on load it must be smaller.
const DEMO_F32_BYTES = 800000;

async function llm(browser, prompt, backend, name, quantize) {
  const query =
    `autorun=llm&prompt=${encodeURIComponent(prompt)}` +
    (backend === 'cpu' ? '&backend=cpu' : '') +
    (quantize ? `&quantize=${quantize}` : '');
  const r = await open(browser, query, name);
  const got = await r.page.evaluate(() => {
    const tps = document.getElementById('llm-tps');
    const w = document.getElementById('llm-weights');
    return {
      weights: w.textContent,
      weightBytes: Number(w.dataset.bytes),
      quantize: w.dataset.quantize,
      state: document.getElementById('transformer-demo').dataset.state,
      output: document.getElementById('llm-output').textContent,
      backend: document.getElementById('llm-backend').textContent.trim(),
      prefill: Number(tps.dataset.prefill),
      decode: Number(tps.dataset.decode),
      tps: tps.textContent,
      status: document.getElementById('llm-status').textContent,
    };
  });
  const want = quantize ? CLI_QUANTIZED[quantize] : sumAnswer(prompt);
  console.log(
    `${name}: backend ${got.backend}, ${prompt} -> ${got.output} (want ${want}); ${got.tps}; ` +
      `${got.status}; ${got.weights} (page done in ${r.seconds} s)`,
  );
  const problems = [];
  if (got.quantize !== (quantize || 'stored')) problems.push(`#llm-weights data-quantize is ${got.quantize}`);
  if (quantize && !(got.weightBytes > 0 && got.weightBytes < DEMO_F32_BYTES / 3)) {
    problems.push(`quantized to ${quantize}, the weights are ${got.weightBytes} bytes`);
  }
  if (r.state !== 'done') problems.push(`body data-state is ${r.state}, not done`);
  if (got.state !== 'done') problems.push(`#transformer-demo data-state is ${got.state}, not done`);
  if (got.output !== want) problems.push(`#llm-output is ${JSON.stringify(got.output)}, expected ${want}`);
  if (got.backend !== backend) problems.push(`#llm-backend is ${got.backend}, expected ${backend}`);
  if (r.backend !== backend) problems.push(`#backend is ${r.backend}, expected ${backend}`);
  for (const v of [got.prefill, got.decode]) {
    if (!Number.isFinite(v) || v <= 0) problems.push(`tokens/s is not a positive finite number: ${v}`);
  }
  if (r.errors.length) problems.push(`page errors: ${r.errors.join('; ')}`);
  await r.page.close();
  return problems.map((p) => `${name}: ${p}`);
}

// A GGUF file picked as a directory (kernels-core's gguf reader, as `--model FILE.gguf`):
// tests/fixtures/gguf/tiny_llama_q4_0.gguf (Q4_0 matrices, written by gguf-py, its SentencePiece
// tokenizer in the metadata). The weights choice is set to q4_k first: a GGUF keeps its own
// types. `kernels generate --model tests/fixtures/gguf/tiny_llama_q4_0.gguf --prompt "the hat"
// --max-tokens 8` prints `<s> the hat` (the GGUF's add_bos_token: the prompt gets its BOS, as
// in transformers) then GGUF_WANT, on the CPU and on wgpu; #llm-output shows the continuation.
const GGUF_WANT = ' t t t t t t t t';

async function pickModel(page, dir) {
  await page.evaluate(() => {
    delete document.getElementById('llm-weights').dataset.loadMs;
  });
  await page.setInputFiles('#llm-dir', dir);
  await page.waitForFunction(
    () =>
      document.getElementById('llm-weights').dataset.loadMs !== undefined ||
      document.getElementById('transformer-demo').dataset.state === 'error',
    null,
    { timeout: TIMEOUT_MS, polling: 200 },
  );
}

// Generates from the prompt box; with `progress`, prints the section's status and output every
// `progress` seconds while it runs (a slow model on SwiftShader).
async function generateIn(page, prompt, maxTokens, progress) {
  await page.fill('#llm-prompt', prompt);
  await page.fill('#llm-max', String(maxTokens));
  const t0 = Date.now();
  await page.click('#llm-run');
  const finished = () => ['done', 'error'].includes(document.getElementById('transformer-demo').dataset.state);
  if (progress) {
    for (;;) {
      try {
        await page.waitForFunction(finished, null, { timeout: progress * 1000, polling: 500 });
        break;
      } catch (e) {
        if (Date.now() - t0 > TIMEOUT_MS) throw e;
        const [status, output] = await page.evaluate(() => [
          document.getElementById('llm-status').textContent,
          document.getElementById('llm-output').textContent,
        ]);
        console.log(`  ${((Date.now() - t0) / 1000).toFixed(0)} s: ${status} ${JSON.stringify(output)}`);
      }
    }
  } else {
    await page.waitForFunction(finished, null, { timeout: TIMEOUT_MS, polling: 500 });
  }
  const seconds = (Date.now() - t0) / 1000;
  const got = await page.evaluate(() => {
    const w = document.getElementById('llm-weights');
    const m = document.getElementById('llm-memory');
    const tps = document.getElementById('llm-tps');
    return {
      state: document.getElementById('transformer-demo').dataset.state,
      output: document.getElementById('llm-output').textContent,
      backend: document.getElementById('llm-backend').textContent.trim(),
      status: document.getElementById('llm-status').textContent,
      model: document.getElementById('llm-model').textContent,
      weights: w.textContent,
      weightBytes: Number(w.dataset.bytes),
      quantize: w.dataset.quantize,
      loadMs: Number(w.dataset.loadMs),
      uploadMs: Number(m.dataset.uploadMs),
      deviceBytes: Number(m.dataset.deviceBytes),
      devicePeak: Number(m.dataset.devicePeak),
      wasmBytes: Number(m.dataset.wasmBytes),
      tps: tps.textContent,
      errors: [...document.querySelectorAll('#errors li')].map((e) => e.textContent),
    };
  });
  return { ...got, seconds };
}

async function gguf(browser, backend, name) {
  const fs = require('fs');
  const os = require('os');
  const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kernels-gguf-')), 'tiny_gguf');
  fs.mkdirSync(dir);
  fs.copyFileSync(path.join(__dirname, '..', 'fixtures', 'gguf', 'tiny_llama_q4_0.gguf'), path.join(dir, 'tiny_llama_q4_0.gguf'));
  const r = await open(browser, backend === 'cpu' ? 'backend=cpu&quantize=q4_k' : 'quantize=q4_k', name, 'ready');
  const { page } = r;
  await pickModel(page, dir);
  const got = await generateIn(page, 'the hat', 8);
  console.log(
    `${name}: backend ${got.backend}, "the hat" -> ${JSON.stringify(got.output)} (want ${GGUF_WANT}); ` +
      `${got.weights}; ${got.status}`,
  );
  const problems = [];
  if (got.state !== 'done') problems.push(`#transformer-demo data-state is ${got.state} (${got.status})`);
  if (got.output !== GGUF_WANT) problems.push(`#llm-output is ${JSON.stringify(got.output)}, expected ${GGUF_WANT}`);
  if (got.backend !== backend) problems.push(`#llm-backend is ${got.backend}, expected ${backend}`);
  if (got.quantize !== 'gguf' || !/GGUF/.test(got.weights)) problems.push(`weights: ${got.quantize}, ${got.weights}`);
  if (!/q4_0/.test(got.weights)) problems.push(`the Q4_0 matrices are not named: ${got.weights}`);
  if (got.errors.length) problems.push(`page errors: ${got.errors.join('; ')}`);
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: true });
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

// The 0.5B figure (a measurement, never in CI): WEB_E2E_MODEL_DIR (a directory with one .gguf
// and a tokenizer.json, e.g. tests/web/make_big05.py's model after `kernels quantize --to q4_k`)
// picked on WebGPU, WEB_E2E_TOKENS (4) tokens from WEB_E2E_PROMPT (`t1 t2 t3 t4`). Prints the load
// time, the upload and generation times, the tokens, the WebGPU storage bytes and the wasm memory.
async function bigGguf(browser, name) {
  const dir = process.env.WEB_E2E_MODEL_DIR;
  if (!dir) return [`${name}: set WEB_E2E_MODEL_DIR to the model directory`];
  const prompt = process.env.WEB_E2E_PROMPT || 't1 t2 t3 t4';
  const tokens = Number(process.env.WEB_E2E_TOKENS || 4);
  const r = await open(browser, 'backend=webgpu', name, 'ready');
  const { page } = r;
  const t0 = Date.now();
  await pickModel(page, dir);
  const picked = (Date.now() - t0) / 1000;
  const adapter = (await page.textContent('#adapter-card')) || '';
  console.log(`${name}: adapter card: ${adapter.replace(/\s+/g, ' ').trim()}`);
  const status = await page.textContent('#llm-status');
  console.log(`${name}: picked in ${picked.toFixed(1)} s: ${status}`);
  const got = await generateIn(page, prompt, tokens, 60);
  const mb = (b) => (b / 1e6).toFixed(1);
  const n = /done: (\d+) tokens/.exec(got.status);
  console.log(
    `${name}: ${got.model}\n  ${got.weights}\n  load (read, parse) ${(got.loadMs / 1000).toFixed(1)} s; ` +
      `upload and warm-up ${(got.uploadMs / 1000).toFixed(1)} s; run (upload, warm-up, generation) ` +
      `${got.seconds.toFixed(1)} s; ${n ? n[1] : '?'} tokens: ${JSON.stringify(got.output)}; ${got.tps}; ${got.status}\n` +
      `  WebGPU storage buffers ${mb(got.deviceBytes)} MB (peak ${mb(got.devicePeak)} MB), ` +
      `wasm memory ${mb(got.wasmBytes)} MB; backend ${got.backend}`,
  );
  const problems = [];
  if (got.state !== 'done') problems.push(`#transformer-demo data-state is ${got.state} (${got.status})`);
  if (got.backend !== 'webgpu') problems.push(`ran on ${got.backend}`);
  if (got.errors.length) problems.push(`page errors: ${got.errors.join('; ')}`);
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: true });
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

// The browser figure against transformers.js (a measurement, never in CI): the peers' protocol
// (../shared/peers/README.md, transformers-js) on the page. WEB_E2E_MODEL_DIR (a Hugging Face llama
// directory, e.g. /tmp/llama-s15 from ../shared/peers/make_llama.py: f32, word-level tokenizer
// `t0`..`t31999`, no eos_token_id) picked with the weights as stored on `backend`; the prompt is
// the peer's: 32 splitmix64 token ids (seed 0) written as `t19700 t25679 ...`. Each run generates
// 129 tokens from it (the prefill, then 128 decode steps: #llm-tps data-decode, the steps' own time,
// not the page's yields) and then one token from the peer's 256-token prefill prompt (seed
// 0xABCDEF01), once untimed and once timed (data-prefill: the one forward over 256 positions,
// logits of the last only, plus the token's read back). WEB_E2E_WARMUP (2) warm-up runs, then
// WEB_E2E_RUNS (3) timed ones; prints each run and the median and range of decode and prefill
// tokens/s. With WEB_E2E_GREEDY_REF (the peer's greedy_ref.json, transformers' greedy tokens)
// the generated tokens are checked against it.
function splitmixTokens(seed, n, vocab) {
  const M = (1n << 64n) - 1n;
  let s = (BigInt(seed) + 0x9e3779b97f4a7c15n) & M;
  const out = [];
  for (let i = 0; i < n; i++) {
    s = (s + 0x9e3779b97f4a7c15n) & M;
    let z = s;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M;
    z ^= z >> 31n;
    out.push(Number(z % BigInt(vocab)));
  }
  return out;
}

// The figures as `best B, median M (min..max)`.
function spread(values) {
  const v = [...values].sort((a, b) => a - b);
  const med = v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
  const f = (x) => x.toFixed(2);
  return `best ${f(v[v.length - 1])}, median ${f(med)} (${f(v[0])}..${f(v[v.length - 1])})`;
}

// The wllama peer's protocol (../shared/peers/README.md, wllama) on the page, when
// WEB_E2E_MODEL_DIR holds a .gguf and no config.json (e.g. a directory with a link to
// /tmp/peer-llamacpp/models/qwen05-Q4_K_M.gguf), picked with `backend`: the peer's prompt text (the
// GGUF's `t<i>` pieces, splitmix64 ids with seed 0xABCDEF01, concatenated), cut to the length at
// which the page counts WEB_E2E_PREFILL (64) prompt tokens, its BOS included, then
// WEB_E2E_DECODE (32) greedy decode steps; WEB_E2E_WARMUP (1) warm-up runs, then WEB_E2E_RUNS (3)
// timed. Prefill is the first step's own time (#llm-tps data-prefill: the forward over the prompt
// and the first token), decode the other steps' (data-decode). Prints each run, then the best
// (the peer's figure), the median and the range.
async function ggufPeer(browser, backend, name, dir) {
  const warmup = Number(process.env.WEB_E2E_WARMUP || 1);
  const runs = Number(process.env.WEB_E2E_RUNS || 3);
  const NEW = Number(process.env.WEB_E2E_DECODE || 32);
  const PREFILL = Number(process.env.WEB_E2E_PREFILL || 64);
  // WEB_E2E_THREADS=N asks the threaded build for N wasm threads (?threads=N; a server with
  // COOP/COEP: WEB_E2E_ISOLATED=1); #threads says what ran.
  const threads = process.env.WEB_E2E_THREADS ? `&threads=${process.env.WEB_E2E_THREADS}` : '';
  const { page } = await open(browser, `backend=${backend}${threads}`, name, 'ready');
  const env = await page.evaluate(() => [
    self.crossOriginIsolated,
    typeof SharedArrayBuffer !== 'undefined',
    document.getElementById('threads').textContent,
  ]);
  const t0 = Date.now();
  await pickModel(page, dir);
  const picked = (Date.now() - t0) / 1000;
  const [model, weights, status] = await page.evaluate(() =>
    ['llm-model', 'llm-weights', 'llm-status'].map((id) => document.getElementById(id).textContent),
  );
  console.log(
    `${name}: Chromium ${browser.version()}; crossOriginIsolated ${env[0]}, SharedArrayBuffer ` +
      `${env[1] ? 'defined' : 'undefined'}; ${env[2]}; picked in ${picked.toFixed(1)} s: ${status}\n` +
      `  ${model}\n  ${weights}`,
  );
  const v = /vocabulary (\d+)/.exec(model);
  if (!v) {
    await page.close();
    return [`${name}: no vocabulary in ${JSON.stringify(model)} (${status})`];
  }
  // The peer's text, cut to the length that makes PREFILL tokens here: llama.cpp's tokenizer makes
  // k + 4 tokens of k pieces; a tokenizer that does not merge the pieces' characters makes more.
  const ids = splitmixTokens(0xabcdef01, PREFILL + 16, Number(v[1]) - 259);
  const full = ids.map((i) => `t${i}`).join('');
  let len = ids.slice(0, Math.max(1, PREFILL - 4)).map((i) => `t${i}`).join('').length;
  let prompt = null;
  const calib = [];
  for (let it = 0; it < 12 && len >= 1 && len <= full.length; it++) {
    const c = await generateIn(page, full.slice(0, len), 1);
    const n = Number((/\((\d+) prompt tokens\)/.exec(c.tps) || [])[1]);
    calib.push(`${len} characters: ${n} tokens`);
    if (n === PREFILL) prompt = full.slice(0, len);
    if (n === PREFILL || !(n > 0)) break;
    len += Math.round(((PREFILL - n) * len) / n) || Math.sign(PREFILL - n);
  }
  console.log(`  prompt calibration: ${calib.join(', ')}`);
  if (prompt === null) {
    await page.close();
    return [`${name}: no ${PREFILL}-token prompt (${calib.join(', ')})`];
  }
  const problems = [];
  const rows = [];
  const outputs = new Set();
  for (let i = 0; i < warmup + runs; i++) {
    const tag = i < warmup ? `warmup${i + 1}` : `run${i - warmup + 1}`;
    const d = await generateIn(page, prompt, NEW + 1);
    const t = await page.evaluate(() => ({ ...document.getElementById('llm-tps').dataset }));
    const row = { prefill: Number(t.prefill), decode: Number(t.decode) };
    if (d.state !== 'done' || !new RegExp(`done: ${NEW + 1} tokens, .*max tokens`).test(d.status)) {
      problems.push(`${tag}: ${d.state}, ${d.status} (want ${NEW + 1} tokens, max tokens)`);
    }
    if (!new RegExp(`\\(${PREFILL} prompt tokens\\), .*\\(${NEW} tokens\\)`).test(d.tps)) problems.push(`${tag}: ${d.tps}`);
    if (d.backend !== backend) problems.push(`${tag}: ran on ${d.backend}`);
    outputs.add(d.output);
    console.log(
      `  ${tag}: prefill ${row.prefill.toFixed(2)} tok/s (${PREFILL} tokens), decode ${row.decode.toFixed(2)} ` +
        `tok/s (${NEW} steps); ${d.seconds.toFixed(1)} s; ${JSON.stringify(d.output.slice(0, 48))}`,
    );
    if (i >= warmup) rows.push(row);
  }
  if (outputs.size !== 1) problems.push(`greedy runs wrote ${outputs.size} different outputs`);
  console.log(
    `${name}: prefill (${PREFILL}) tok/s ${spread(rows.map((x) => x.prefill))}; decode (${NEW}) tok/s ` +
      `${spread(rows.map((x) => x.decode))}; ${runs} runs after ${warmup} warm-up`,
  );
  const errors = await page.$$eval('#errors li', (li) => li.map((e) => e.textContent));
  if (errors.length) problems.push(`page errors: ${errors.join('; ')}`);
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: true });
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

async function llmPeer(browser, backend, name) {
  const fs = require('fs');
  const dir = process.env.WEB_E2E_MODEL_DIR;
  if (!dir) return [`${name}: set WEB_E2E_MODEL_DIR to the model directory`];
  if (!fs.existsSync(path.join(dir, 'config.json'))) return ggufPeer(browser, backend, name, dir);
  const warmup = Number(process.env.WEB_E2E_WARMUP || 2);
  const runs = Number(process.env.WEB_E2E_RUNS || 3);
  const NEW = Number(process.env.WEB_E2E_DECODE || 128);
  const PREFILL = Number(process.env.WEB_E2E_PREFILL || 256);
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')).model.vocab;
  const words = [];
  for (const [w, id] of Object.entries(vocab)) words[id] = w;
  const text = (ids) => ids.map((i) => words[i]).join(' ');
  const promptIds = splitmixTokens(0, 32, config.vocab_size);
  const prefillIds = splitmixTokens(0xabcdef01, PREFILL, config.vocab_size);
  const prompt = text(promptIds);
  const prefillPrompt = text(prefillIds);
  let ref = null;
  if (process.env.WEB_E2E_GREEDY_REF) {
    ref = JSON.parse(fs.readFileSync(process.env.WEB_E2E_GREEDY_REF, 'utf8'));
    if (ref.prompt.join() !== promptIds.join()) return [`${name}: greedy_ref.json has another prompt`];
  }
  const problems = [];
  const r = await open(browser, `backend=${backend}`, name, 'ready');
  const { page } = r;
  const env = await page.evaluate(() => ({
    isolated: self.crossOriginIsolated,
    sab: typeof SharedArrayBuffer !== 'undefined',
    ua: navigator.userAgent,
  }));
  console.log(
    `${name}: page ready in ${r.seconds} s; Chromium ${browser.version()}; crossOriginIsolated ${env.isolated}, SharedArrayBuffer ` +
      `${env.sab ? 'defined' : 'undefined'} (no wasm threads without it); ${env.ua}`,
  );
  const t0 = Date.now();
  await pickModel(page, dir);
  const picked = (Date.now() - t0) / 1000;
  let first = null;
  const rate = (s) => Number(s);
  const one = async (tag) => {
    const d = await generateIn(page, prompt, NEW + 1);
    if (!first) first = d;
    const dec = await page.evaluate(() => ({ ...document.getElementById('llm-tps').dataset }));
    const n = /done: (\d+) tokens, (.*)$/.exec(d.status);
    if (d.state !== 'done' || !n || Number(n[1]) !== NEW + 1 || !/max tokens/.test(n[2])) {
      problems.push(`${tag}: ${d.state}, ${d.status} (want ${NEW + 1} tokens, max tokens)`);
    }
    if (!new RegExp(`\\(32 prompt tokens\\), .*\\(${NEW} tokens\\)`).test(d.tps)) problems.push(`${tag}: ${d.tps}`);
    if (d.backend !== backend) problems.push(`${tag}: ran on ${d.backend}`);
    const got = d.output.trim().split(/\s+/).map((w) => vocab[w]);
    let match = '';
    if (ref) {
      let i = 0;
      while (i < got.length && got[i] === ref.generated[i]) i++;
      match = `, greedy tokens match transformers ${i}/${ref.generated.length}`;
      if (i < Math.min(got.length, ref.generated.length)) problems.push(`${tag}: greedy tokens differ at ${i}`);
    }
    await generateIn(page, prefillPrompt, 1);
    const p = await generateIn(page, prefillPrompt, 1);
    const pre = await page.evaluate(() => ({ ...document.getElementById('llm-tps').dataset }));
    if (!new RegExp(`\\(${PREFILL} prompt tokens\\)`).test(p.tps)) problems.push(`${tag}: prefill ${p.tps}`);
    if (p.state !== 'done') problems.push(`${tag}: prefill ${p.state}, ${p.status}`);
    const row = {
      decode: rate(dec.decode),
      prefill: rate(pre.prefill),
      prefill32: rate(dec.prefill),
      tokens: got.length,
    };
    console.log(
      `  ${tag}: decode ${row.decode.toFixed(1)} tok/s (${NEW} steps), prefill ${row.prefill.toFixed(1)} tok/s ` +
        `(${PREFILL} tokens; the 32-token prompt's ${row.prefill32.toFixed(1)})${match}`,
    );
    return row;
  };
  for (let i = 0; i < warmup; i++) await one(`warmup${i + 1}`);
  const rows = [];
  for (let i = 0; i < runs; i++) rows.push(await one(`run${i + 1}`));
  const stat = (k) => {
    const v = rows.map((x) => x[k]).sort((a, b) => a - b);
    const med = v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    return `median ${med.toFixed(1)} (${v[0].toFixed(1)}..${v[v.length - 1].toFixed(1)})`;
  };
  const last = await page.evaluate(() => [
    document.getElementById('llm-weights').textContent,
    document.getElementById('llm-model').textContent,
  ]);
  console.log(
    `${name}: ${last[1]}; ${last[0]}\n  decode tok/s ${stat('decode')}; prefill (${PREFILL}) tok/s ` +
      `${stat('prefill')}; prefill (32) tok/s ${stat('prefill32')}; ${runs} runs after ${warmup} warm-up\n` +
      `  picked in ${picked.toFixed(1)} s (read, parse ${(first.loadMs / 1000).toFixed(1)} s); the first ` +
      `generation ${first.seconds.toFixed(1)} s (upload and warm-up ${(first.uploadMs / 1000).toFixed(1)} s)`,
  );
  const errors = await page.$$eval('#errors li', (li) => li.map((e) => e.textContent));
  if (errors.length) problems.push(`page errors: ${errors.join('; ')}`);
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: true });
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

// The page as a visitor sees it, at desktop and phone widths: after the transformer has run,
// nothing overflows sideways (a long unbroken generated text included), the device is a card
// (no Rust Debug dump anywhere), the backend names itself without empty fields, the weights'
// progress bar went away, and the screenshots are saved for a look.
async function layout(browser, width, height, name) {
  const page = await browser.newPage({ viewport: { width, height } });
  await page.goto(`${base}/?autorun=llm`);
  await page.waitForFunction(() => ['done', 'error'].includes(document.body.dataset.state), null, {
    timeout: TIMEOUT_MS,
    polling: 500,
  });
  const got = await page.evaluate(() => {
    const out = document.getElementById('llm-output');
    out.textContent += ' ' + '9750$'.repeat(400) + ' ' + 'a long run of words '.repeat(60);
    const text = document.body.innerText;
    return {
      state: document.body.dataset.state,
      overflow: document.documentElement.scrollWidth - window.innerWidth,
      outputWidth: out.scrollWidth - out.clientWidth,
      card: [...document.querySelectorAll('#adapter-card dt')].map((e) => e.textContent),
      debugDump: /Features \{|Limits \{|FeaturesWGPU|\(, /.test(text),
      loadHidden: document.getElementById('load').hidden,
      errors: [...document.querySelectorAll('#errors li')].map((e) => e.textContent),
    };
  });
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: true });
  console.log(`${name} (${width}x${height}): overflow ${got.overflow} px, card ${got.card.join('/')}`);
  const problems = [];
  if (got.state !== 'done') problems.push(`body data-state is ${got.state}`);
  if (got.overflow > 1) problems.push(`the page scrolls sideways by ${got.overflow} px`);
  if (got.outputWidth > 1) problems.push(`#llm-output overflows by ${got.outputWidth} px`);
  if (!got.card.includes('adapter')) problems.push(`#adapter-card has no adapter row: ${got.card}`);
  if (got.debugDump) problems.push('the page shows a Rust Debug dump or an empty name field');
  if (!got.loadHidden) problems.push('the weights progress bar is still shown');
  if (got.errors.length) problems.push(`page errors: ${got.errors.join('; ')}`);
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

// Chat mode: kernels chat's test model (the qwen2 family checkpoint, its context widened, with
// the chat fixture's ChatML tokenizer and Qwen2.5 template) picked as a directory, two messages.
async function chat(browser, name) {
  const fs = require('fs');
  const os = require('os');
  const root = path.join(__dirname, '..', 'fixtures');
  const model = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kernels-chat-')), 'qwen2_chat');
  fs.mkdirSync(model);
  const config = JSON.parse(fs.readFileSync(path.join(root, 'families/qwen2/config.json'), 'utf8'));
  config.max_position_embeddings = 256;
  fs.writeFileSync(path.join(model, 'config.json'), JSON.stringify(config));
  fs.copyFileSync(path.join(root, 'families/qwen2/model.safetensors'), path.join(model, 'model.safetensors'));
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
    fs.copyFileSync(path.join(root, 'chat/qwen2_chat', f), path.join(model, f));
  }
  const r = await open(browser, 'autorun=llm&backend=cpu', name);
  const { page } = r;
  const problems = [];
  await page.setInputFiles('#llm-dir', model);
  await page.waitForFunction(() => document.getElementById('transformer-demo').dataset.mode === 'chat', null, {
    timeout: 60000,
  });
  await page.fill('#llm-max', '10');
  const statuses = [];
  for (const [i, message] of ['hello there', 'what now?'].entries()) {
    await page.fill('#llm-prompt', message);
    await page.click('#llm-run');
    await page.waitForFunction(
      (n) =>
        document.querySelectorAll('#llm-chat p').length === n ||
        document.getElementById('transformer-demo').dataset.state === 'error',
      2 * (i + 1),
      { timeout: TIMEOUT_MS, polling: 200 },
    );
    statuses.push(await page.textContent('#llm-status'));
  }
  const turns = await page.$$eval('#llm-chat p', (ps) => ps.map((p) => [p.dataset.role, p.textContent]));
  const state = await page.getAttribute('#transformer-demo', 'data-state');
  console.log(`${name}: ${JSON.stringify(turns)}; ${statuses.join(' / ')}`);
  if (state !== 'done') problems.push(`#transformer-demo data-state is ${state}, not done`);
  const roles = turns.map((t) => t[0]).join(',');
  if (roles !== 'user,assistant,user,assistant') problems.push(`turns are ${roles}`);
  // As in kernels chat's test: the first reply ends its turn, the second reaches max tokens.
  if (!/end token/.test(statuses[0] || '')) problems.push(`first reply: ${statuses[0]}`);
  if (!/max tokens/.test(statuses[1] || '')) problems.push(`second reply: ${statuses[1]}`);
  if (turns.length > 1 && turns[1][1] === 'assistant: ') problems.push('the first reply is empty');
  if (r.errors.length) problems.push(`page errors: ${r.errors.join('; ')}`);
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: true });
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

// The Train section's parity strip budget is the page's (web/src/train.rs, PARITY_ATOL and
// PARITY_RTOL: every parity step's loss on WebGPU within 1e-5 + 1e-4 |loss| of the wasm CPU's,
// the relative part being the CLI's budget for wgpu replicas against one CPU,
// native-cli/tests/devices_cli.rs): the check asserts the page's #train-parity[data-within].

// The small model from scratch (74,880 parameters), 50 steps of 4 problems, one evaluation at the
// end on 50 held-out problems, the default 20 parity steps: on SwiftShader a step of this model
// costs about 2 s at 4 problems (most of it fixed, per dispatch), about 12 s at 32.
const TRAIN_QUERY = 'autorun=train&start=small&steps=50&batch=4&eval_every=50&eval_problems=50';

// ?autorun=train&steps=N: a small llama trained from scratch on the addition task in the tab.
// Asserts the run finished its steps with a finite loss that fell, the rates and the held-out
// accuracy are figures, the chart drew every step, and (on WebGPU) the parity strip compared the
// first steps with the wasm CPU within its budget. Then "use these weights" hands the
// model to the transformer section and "download weights" gives a zip.
async function train(browser, query, want, name) {
  const r = await open(browser, query, name);
  const { page } = r;
  const read = () =>
    page.evaluate(() => {
      const t = document.getElementById('train');
      const p = document.getElementById('train-parity');
      const rate = document.getElementById('train-rate');
      const ev = document.getElementById('train-eval');
      const num = (v) => (v === undefined || v === '' ? NaN : Number(v));
      return {
        state: t.dataset.state,
        step: num(t.dataset.step),
        loss: num(t.dataset.loss),
        first: num(t.dataset.firstLoss),
        backend: t.dataset.backend,
        maxDiff: num(p.dataset.maxDiff),
        maxRel: num(p.dataset.maxRel),
        paritySteps: num(p.dataset.steps),
        within: p.dataset.within || '',
        skipped: p.dataset.skipped || '',
        parity: p.textContent,
        stepsPerS: num(rate.dataset.stepsPerS),
        tokensPerS: num(rate.dataset.tokensPerS),
        accuracy: num(ev.dataset.accuracy),
        evalStep: num(ev.dataset.step),
        eval: ev.textContent,
        points: num(document.getElementById('train-chart').dataset.points),
        status: document.getElementById('train-status').textContent,
      };
    });
  const got = await read();
  const steps = Number(new URLSearchParams(query).get('steps'));
  const until = Number(new URLSearchParams(query).get('until') || NaN);
  console.log(
    `${name}: backend ${got.backend}, ${got.step} steps, loss ${got.first} -> ${got.loss}, ` +
      `${got.stepsPerS} steps/s, ${got.tokensPerS} tokens/s; held-out ${got.eval} ` +
      `(last at step ${got.evalStep}); parity: ${got.parity}; page done in ${r.seconds} s`,
  );
  const problems = [];
  if (r.state !== 'done') problems.push(`body data-state is ${r.state}, not done`);
  if (got.state !== 'done') problems.push(`#train data-state is ${got.state}, not done (${got.status})`);
  if (r.backend !== want || got.backend !== want) problems.push(`trained on ${got.backend}, expected ${want}`);
  if (Number.isFinite(until)) {
    if (!(got.accuracy >= until)) problems.push(`held-out accuracy ${got.accuracy} never reached ${until}`);
  } else if (got.step !== steps) {
    problems.push(`#train data-step is ${got.step}, expected ${steps}`);
  }
  if (!(Number.isFinite(got.loss) && got.loss < got.first)) problems.push(`the loss did not fall: ${got.first} -> ${got.loss}`);
  for (const v of [got.stepsPerS, got.tokensPerS]) {
    if (!Number.isFinite(v) || v <= 0) problems.push(`a rate is not a positive finite number: ${v}`);
  }
  if (!(got.accuracy >= 0 && got.accuracy <= 1)) problems.push(`held-out accuracy ${got.accuracy}`);
  if (got.points !== got.step) problems.push(`the chart drew ${got.points} points for ${got.step} steps`);
  if (want === 'webgpu') {
    if (!(got.paritySteps > 0)) problems.push(`no parity steps ran (${got.parity})`);
    if (got.within !== 'true') {
      problems.push(`parity: outside the budget (largest difference ${got.maxDiff}, ${got.maxRel} relative)`);
    }
  } else if (!got.skipped) {
    problems.push('on the CPU the parity strip should say it was skipped');
  }
  if (r.errors.length) problems.push(`page errors: ${r.errors.join('; ')}`);
  // The trained model goes to the transformer section, and downloads as a zip.
  await page.click('#train-use');
  await page.waitForFunction(
    () => /trained in this tab/.test(document.getElementById('llm-model').textContent),
    null,
    { timeout: 60000 },
  );
  const [download] = await Promise.all([page.waitForEvent('download', { timeout: 60000 }), page.click('#train-download')]);
  const fs = require('fs');
  const zipPath = path.join(outDir, `${name}.zip`);
  await download.saveAs(zipPath);
  const zip = fs.readFileSync(zipPath);
  const listed = ['config.json', 'model.safetensors', 'tokenizer.json'].filter((f) => zip.includes(`adder-trained/${f}`));
  console.log(`  ${name}: "use these weights" -> ${await page.textContent('#llm-model')}; zip ${zip.length} bytes with ${listed.join(', ')}`);
  if (zip.readUInt32LE(0) !== 0x04034b50) problems.push('the download is not a zip');
  if (listed.length !== 3) problems.push(`the zip lists ${listed.join(', ')}`);
  const errors = await page.$$eval('#errors li', (li) => li.map((e) => e.textContent));
  if (errors.length) problems.push(`page errors after use/download: ${errors.join('; ')}`);
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

// The Train section's controls on the wasm CPU: Train, Pause (the step stops moving), Resume
// (it moves again), Reset (back to idle, step 0), with no autorun.
async function trainControls(browser, name) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (e) => console.log(`  [${name}] page error: ${e}`));
  await page.goto(`${base}/?backend=cpu`);
  await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), null, {
    timeout: TIMEOUT_MS,
  });
  const problems = [];
  const train = () => page.$eval('#train', (e) => ({ state: e.dataset.state, step: Number(e.dataset.step) }));
  const until = (f, arg) => page.waitForFunction(f, arg, { timeout: 60000, polling: 50 });
  await page.selectOption('#train-start', 'small');
  await page.fill('#train-steps', '100000');
  await page.fill('#train-batch', '4');
  await page.fill('#train-eval-every', '100000');
  await page.click('#train-run');
  await until(() => Number(document.getElementById('train').dataset.step) >= 10);
  await page.click('#train-pause');
  await until(() => document.getElementById('train').dataset.state === 'paused');
  const paused = await train();
  await page.waitForTimeout(500);
  const still = await train();
  if (still.step !== paused.step) problems.push(`paused at step ${paused.step}, then at ${still.step}`);
  await page.click('#train-pause');
  await until((n) => Number(document.getElementById('train').dataset.step) > n + 5, paused.step);
  const resumed = await train();
  if (resumed.state !== 'running') problems.push(`after Resume the section is ${resumed.state}`);
  await page.click('#train-pause');
  await until(() => document.getElementById('train').dataset.state === 'paused');
  await page.click('#train-reset');
  await until(() => document.getElementById('train').dataset.state === 'idle');
  const reset = await train();
  if (reset.step !== 0) problems.push(`after Reset the step is ${reset.step}`);
  const errors = await page.$$eval('#errors li', (li) => li.map((e) => e.textContent));
  if (errors.length) problems.push(`page errors: ${errors.join('; ')}`);
  console.log(`${name}: paused at step ${paused.step}, resumed to ${resumed.step}, reset to ${reset.step}`);
  await page.close();
  return problems.map((p) => `${name}: ${p}`);
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ARGS,
  });
  const all = [
    ['parity-webgpu', () => parity(browser, 'autorun=parity', 'parity-webgpu', 'webgpu')],
    ['parity-cpu', () => parity(browser, 'autorun=parity&backend=cpu', 'parity-cpu', 'cpu')],
    ['bench-webgpu', () => bench(browser, 'bench-webgpu')],
    ['gru-webgpu', () => gru(browser, 'autorun=gru', 'gru-webgpu', 'webgpu')],
    ['gru-cpu', () => gru(browser, 'autorun=gru&backend=cpu', 'gru-cpu', 'cpu')],
    ['llm-webgpu', () => llm(browser, '123+456=', 'webgpu', 'llm-webgpu')],
    ['llm-cpu', () => llm(browser, '123+456=', 'cpu', 'llm-cpu')],
    ['llm-q4k-webgpu', () => llm(browser, '123+456=', 'webgpu', 'llm-q4k-webgpu', 'q4_k')],
    ['llm-q8-cpu', () => llm(browser, '123+456=', 'cpu', 'llm-q8-cpu', 'q8_0')],
    ['llm-q4k-cpu', () => llm(browser, '123+456=', 'cpu', 'llm-q4k-cpu', 'q4_k')],
    ['gguf-webgpu', () => gguf(browser, 'webgpu', 'gguf-webgpu')],
    ['gguf-cpu', () => gguf(browser, 'cpu', 'gguf-cpu')],
    ['layout-desktop', () => layout(browser, 1280, 900, 'layout-desktop')],
    ['layout-phone', () => layout(browser, 390, 844, 'layout-phone')],
    ['chat-cpu', () => chat(browser, 'chat-cpu')],
    ['train-webgpu', () => train(browser, TRAIN_QUERY, 'webgpu', 'train-webgpu')],
    ['train-cpu', () => train(browser, `${TRAIN_QUERY}&backend=cpu`, 'cpu', 'train-cpu')],
    ['train-controls', () => trainControls(browser, 'train-controls')],
  ];
  // Measurements, run only when named in WEB_E2E_ONLY (minutes): the steps the wasm CPU backend
  // takes to 90% held-out exact match from scratch with the page's defaults (the demo model's
  // recipe: 6000 steps of 64 problems), evaluated every 100 steps on 200 held-out problems; and
  // big-gguf, a large model picked on WebGPU (WEB_E2E_MODEL_DIR, see bigGguf); llm-peer and
  // llm-peer-webgpu, the transformers.js peer's protocol on a picked model (see llmPeer).
  const measurements = [
    ['train-cpu-90', () => train(browser, 'autorun=train&backend=cpu&until=0.9', 'cpu', 'train-cpu-90')],
    ['big-gguf', () => bigGguf(browser, 'big-gguf')],
    ['llm-peer', () => llmPeer(browser, 'cpu', 'llm-peer')],
    ['llm-peer-webgpu', () => llmPeer(browser, 'webgpu', 'llm-peer-webgpu')],
  ];
  // WEB_E2E_ONLY=gru-cpu,gru-webgpu runs a subset (while working on one section).
  const only = (process.env.WEB_E2E_ONLY || '').split(',').filter(Boolean);
  const chosen = all
    .filter(([n]) => only.length === 0 || only.includes(n))
    .concat(measurements.filter(([n]) => only.includes(n)));
  let problems = [];
  try {
    for (const [, check] of chosen) problems = problems.concat(await check());
  } finally {
    await browser.close();
  }
  const checks = chosen.length;
  const failedChecks = new Set(problems.map((p) => p.split(':')[0])).size;
  for (const p of problems) console.error(`FAIL ${p}`);
  console.log(`web e2e: ${checks - failedChecks} passed, ${failedChecks} failed`);
  process.exit(failedChecks === 0 ? 0 : 1);
})().catch((e) => {
  console.error(`web e2e: ${e.stack || e}`);
  process.exit(1);
});
