// Import every module of the code asset on CPython 3.14 (Pyodide, from npm) against the built layer's contents.
// Usage: node import_on_314.mjs <asset dir> <layer site dir> <substitutes dir> <runtime dir> <out json>
// Host folders are mounted through NODEFS; sys.path is the Lambda runtime's order: code, the layer, the runtime's own.
import { loadPyodide } from "pyodide";
import { writeFileSync } from "node:fs";

const [asset, layer, substitutes, runtime, out] = process.argv.slice(2);
const py = await loadPyodide({ stdout: () => {}, stderr: () => {} });
for (const [host, mount] of [[asset, "/asset"], [layer, "/layer"], [substitutes, "/substitutes"], [runtime, "/runtime"]]) {
  py.FS.mkdirTree(mount);
  py.FS.mount(py.FS.filesystems.NODEFS, { root: host }, mount);
}
const result = py.runPython(`
import importlib, json, pkgutil, sys, traceback
sys.path[:0] = ["/substitutes", "/asset", "/layer", "/runtime"]
import governor
outcome = {"python": sys.version.split()[0], "platform": sys.platform, "modules": {}}
names = sorted(m.name for m in pkgutil.walk_packages(governor.__path__, "governor."))
for name in ["governor", *names]:
    try:
        importlib.import_module(name)
        outcome["modules"][name] = "ok"
    except BaseException as error:
        outcome["modules"][name] = f"{type(error).__name__}: {error}"
outcome["third_party"] = {}
for name in ("aws_lambda_powertools", "pydantic", "pydantic_core", "yaml", "slack_sdk", "aws_xray_sdk", "numpy", "matplotlib"):
    try:
        module = importlib.import_module(name)
        outcome["third_party"][name] = "ok " + getattr(module, "__file__", "")
    except BaseException as error:
        outcome["third_party"][name] = f"{type(error).__name__}: {error}".splitlines()[0]
outcome["loaded"] = sorted({m.split(".")[0] for m in sys.modules})
json.dumps(outcome)
`);
writeFileSync(out, result);
