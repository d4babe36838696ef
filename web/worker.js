// A wasm CPU worker of the threaded page build (web/build-threads.sh puts it in threads/ beside
// kernels-web.js): the page posts its compiled module and its shared memory; the worker
// instantiates the module on that memory, then runs kernels-core's pool worker loop for ever
// (web/src/threads.rs, pool_worker). Its products' ranges come through the shared memory.
import init, { pool_worker } from './kernels-web.js';

self.onmessage = async (event) => {
  self.onmessage = null;
  const [module, memory] = event.data;
  await init({ module_or_path: module, memory });
  pool_worker();
};
