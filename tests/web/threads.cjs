// The page's wasm threads (tests/web_e2e.sh runs it after e2e.cjs, on the same dist/ with the
// threaded build in dist/threads/): node threads.cjs PLAIN_URL ISOLATED_URL OUT_DIR, the same
// files served without and with Cross-Origin-Opener-Policy: same-origin and
// Cross-Origin-Embedder-Policy: require-corp.
// - threads-fallback: served plainly, the page is not cross-origin isolated, loads the
//   single-threaded build and says it runs one thread because of that (#threads).
// - threads-isolated: served isolated with ?threads=2, the page is isolated, loads the threaded
//   build (#threads[data-build=threads][data-threads=2]) and its web workers run ranges of the
//   products (wasmBindings.worker_ranges() > 0): the demo model quantized on load (q4_k: its
//   prefill products are split over the threads) writes the same greedy tokens as the
//   single-threaded build, the pool's products being the same bits on any thread count.
const path = require('path');
const { chromium } = require('playwright-core');

const [plain, isolated, outDir] = process.argv.slice(2);
const TIMEOUT_MS = 300_000;
const QUERY = 'autorun=llm&backend=cpu&quantize=q4_k&prompt=123%2B456%3D';

async function run(browser, base, query, name) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (e) => console.log(`  [${name}] page error: ${e}`));
  page.on('console', (m) => {
    if (m.type() === 'error') console.log(`  [${name}] console error: ${m.text()}`);
  });
  await page.goto(`${base}/?${query}`);
  await page.waitForFunction(() => ['done', 'error'].includes(document.body.dataset.state), null, {
    timeout: TIMEOUT_MS,
    polling: 500,
  });
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: true });
  const got = await page.evaluate(() => {
    const t = document.getElementById('threads');
    const ranges = window.wasmBindings && window.wasmBindings.worker_ranges;
    return {
      state: document.body.dataset.state,
      isolated: self.crossOriginIsolated === true,
      threads: Number(t.dataset.threads),
      build: t.dataset.build,
      chipIsolated: t.dataset.isolated,
      note: t.textContent,
      output: document.getElementById('llm-output').textContent,
      backend: document.getElementById('llm-backend').textContent.trim(),
      quantize: document.getElementById('llm-weights').dataset.quantize,
      workerRanges: typeof ranges === 'function' ? ranges() : null,
      errors: [...document.querySelectorAll('#errors li')].map((e) => e.textContent),
    };
  });
  await page.close();
  console.log(`  ${name}: ${got.note}; output ${JSON.stringify(got.output)}; worker ranges ${got.workerRanges}`);
  return got;
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
  const problems = [];
  try {
    const one = await run(browser, plain, QUERY, 'threads-fallback');
    if (one.state !== 'done') problems.push(`threads-fallback: state ${one.state}`);
    if (one.isolated) problems.push('threads-fallback: the plain server made the page isolated');
    if (one.threads !== 1 || one.build !== 'single' || one.chipIsolated !== 'false') {
      problems.push(`threads-fallback: #threads ${one.threads} threads, build ${one.build}, isolated ${one.chipIsolated}`);
    }
    if (!/^wasm threads: 1 \(.*not cross-origin isolated/.test(one.note)) {
      problems.push(`threads-fallback: #threads does not say why one thread: ${JSON.stringify(one.note)}`);
    }
    if (one.backend !== 'cpu' || one.quantize !== 'q4_k') problems.push(`threads-fallback: ran ${one.backend}, ${one.quantize}`);
    if (one.errors.length) problems.push(`threads-fallback: page errors: ${one.errors.join('; ')}`);

    const two = await run(browser, isolated, `${QUERY}&threads=2`, 'threads-isolated');
    if (two.state !== 'done') problems.push(`threads-isolated: state ${two.state}`);
    if (!two.isolated) problems.push('threads-isolated: the page is not cross-origin isolated');
    if (two.threads !== 2 || two.build !== 'threads' || two.chipIsolated !== 'true') {
      problems.push(`threads-isolated: #threads ${two.threads} threads, build ${two.build}, isolated ${two.chipIsolated}`);
    }
    if (!/^wasm threads: 2 \(cross-origin isolated/.test(two.note)) {
      problems.push(`threads-isolated: #threads says ${JSON.stringify(two.note)}`);
    }
    if (!(two.workerRanges > 0)) problems.push(`threads-isolated: the workers ran no range (${two.workerRanges})`);
    if (two.backend !== 'cpu' || two.quantize !== 'q4_k') problems.push(`threads-isolated: ran ${two.backend}, ${two.quantize}`);
    if (two.output !== one.output || one.output === '') {
      problems.push(`threads-isolated: output ${JSON.stringify(two.output)}, one thread ${JSON.stringify(one.output)}`);
    }
    if (two.errors.length) problems.push(`threads-isolated: page errors: ${two.errors.join('; ')}`);
  } finally {
    await browser.close();
  }
  for (const p of problems) console.error(`FAIL ${p}`);
  const failed = new Set(problems.map((p) => p.split(':')[0])).size;
  console.log(`web threads: ${2 - failed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
})().catch((e) => {
  console.error(`web threads: ${e.stack || e}`);
  process.exit(1);
});
