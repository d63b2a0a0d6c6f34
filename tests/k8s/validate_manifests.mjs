// Validates deploy/k8s/*.yaml against the Kubernetes API schema (the kubernetes-models
// npm package: JSON schemas generated from the Kubernetes OpenAPI spec), document by
// document, by kind. Usage: node validate_manifests.mjs <deploy/k8s> <node_modules>;
// exits 1 on any error.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [dir, modules] = process.argv.slice(2);
const load = async (rel) => import(pathToFileURL(path.join(modules, rel)).href);
const YAML = (await load("yaml/dist/index.js")).default ?? (await load("yaml/dist/index.js"));
const kinds = {
  "apps/v1 StatefulSet": ["kubernetes-models/apps/v1/StatefulSet.js", "StatefulSet"],
  "v1 Service": ["kubernetes-models/v1/Service.js", "Service"],
  "v1 ConfigMap": ["kubernetes-models/v1/ConfigMap.js", "ConfigMap"],
  "v1 Secret": ["kubernetes-models/v1/Secret.js", "Secret"],
};

let documents = 0, errors = 0;
const seen = new Set();
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(path.join(dir, file), "utf8"))) {
    const object = doc.toJS();
    if (object == null) continue;
    documents++;
    const kind = `${object.apiVersion} ${object.kind}`;
    const model = kinds[kind];
    if (!model) {
      console.log(`FAIL ${file}: no schema known for ${kind}`);
      errors++;
      continue;
    }
    try {
      const Model = (await load(model[0]))[model[1]];
      new Model(object).validate();
      seen.add(kind);
      console.log(`ok   ${file}: ${kind} ${object.metadata.name}`);
    } catch (e) {
      console.log(`FAIL ${file}: ${kind} ${object.metadata && object.metadata.name}: ${e.message}`);
      errors++;
    }
  }
}
for (const want of ["apps/v1 StatefulSet", "v1 Service", "v1 ConfigMap"]) {
  if (!seen.has(want)) {
    console.log(`FAIL: no valid ${want} in ${dir}`);
    errors++;
  }
}
console.log(`${documents} documents, ${errors} errors`);
process.exit(errors ? 1 : 0);
