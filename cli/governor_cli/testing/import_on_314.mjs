// Import one function's modules of the code asset on CPython 3.14 (Pyodide, from npm) against exactly its layers.
// Usage: node import_on_314.mjs <job json> <out json>
// The job names host folders: substitutes (each first on sys.path), the code asset, the function's layer sites in
// order, the runtime's own packages; the modules to import and the third-party names to probe. Host folders are
// mounted through NODEFS; sys.path is the Lambda runtime's order: code, the layers, the runtime's own.
import { loadPyodide } from "pyodide";
import { readFileSync, writeFileSync } from "node:fs";

const [jobFile, out] = process.argv.slice(2);
const job = JSON.parse(readFileSync(jobFile, "utf8"));
const py = await loadPyodide({ stdout: () => {}, stderr: () => {} });
const mount = (host, index) => {
  const at = `/mnt/${index}`;
  py.FS.mkdirTree(at);
  py.FS.mount(py.FS.filesystems.NODEFS, { root: host }, at);
  return at;
};
let index = 0;
const path = [...job.substitutes, job.asset, ...job.layers, job.runtime].map((host) => mount(host, index++));
py.globals.set("job_path", py.toPy(path));
py.globals.set("job_modules", py.toPy(job.modules));
py.globals.set("job_probe", py.toPy(job.probe));
const result = py.runPython(`
import importlib, json, sys
sys.path[:0] = list(job_path)
outcome = {"python": sys.version.split()[0], "platform": sys.platform, "modules": {}, "third_party": {}}
for name in job_modules:
    try:
        importlib.import_module(name)
        outcome["modules"][name] = "ok"
    except BaseException as error:
        outcome["modules"][name] = f"{type(error).__name__}: {error}"
for name in job_probe:
    try:
        module = importlib.import_module(name)
        outcome["third_party"][name] = "ok " + getattr(module, "__file__", "")
    except BaseException as error:
        outcome["third_party"][name] = f"{type(error).__name__}: {error}".splitlines()[0]
json.dumps(outcome)
`);
writeFileSync(out, result);
