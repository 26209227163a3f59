#!/usr/bin/env python3
"""Writes testdata/k8s/openapi-v2.json: the Kubernetes API schema of the kinds deploy/ uses (see
ROOTS) and everything they reference, as a Swagger 2.0 `definitions` document, for the fake API
server of kube/tests/deploy_cases.rs to serve to `kubectl apply --dry-run=client --validate=true`
(see README.md beside this file).

Source: the models of the Kubernetes Python client 34.1.0 (PyPI `kubernetes`), which OpenAPI
Generator made from Kubernetes' own OpenAPI document, release-1.34 (each model's docstring says
so; the script refuses models of mixed releases). From each model class: `openapi_types` (field
-> type), `attribute_map` (field -> JSON name) and the fields whose setter refuses None
(required). The source is read as text, not imported.

    pip download --no-deps kubernetes==34.1.0 && unzip -q kubernetes-34.1.0-py2.py3-none-any.whl -d x
    testdata/k8s/make-openapi-v2.py x/kubernetes/client/models
"""
import ast, json, os, re, sys

if len(sys.argv) != 2:
    sys.exit(__doc__)
MODELS = sys.argv[1]
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openapi-v2.json")
# model -> (group, version, kind): the kinds deploy/ and deploy/examples/ may use. The client
# names a model by its kind, prefixed with its group where two groups share one:
# resource.k8s.io's ResourceClaim is ResourceV1ResourceClaim (CoreV1ResourceClaim is a
# container's `resources.claims` entry).
ROOTS = {
    "V1Namespace": ("", "v1", "Namespace"),
    "V1ConfigMap": ("", "v1", "ConfigMap"),
    "V1ServiceAccount": ("", "v1", "ServiceAccount"),
    "V1Pod": ("", "v1", "Pod"),
    "V1DaemonSet": ("apps", "v1", "DaemonSet"),
    "V1RuntimeClass": ("node.k8s.io", "v1", "RuntimeClass"),
    "V1ClusterRole": ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    "V1ClusterRoleBinding": ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    "V1DeviceClass": ("resource.k8s.io", "v1", "DeviceClass"),
    "V1ResourceClaimTemplate": ("resource.k8s.io", "v1", "ResourceClaimTemplate"),
    "ResourceV1ResourceClaim": ("resource.k8s.io", "v1", "ResourceClaim"),
}
# The package's version, from kubernetes/__init__.py two levels above the models.
init = os.path.join(MODELS, os.pardir, os.pardir, "__init__.py")
version = re.search(r'^__version__ = "(.*)"', open(init).read(), re.M).group(1)

classes = {}
release = None
for f in sorted(os.listdir(MODELS)):
    if not f.endswith(".py") or f == "__init__.py":
        continue
    src = open(os.path.join(MODELS, f)).read()
    m = re.search(r"^class (\w+)\(object\):", src, re.M)
    if not m:
        continue
    r = re.search(r"The version of the OpenAPI document: (\S+)", src)
    if r:
        assert release in (None, r.group(1)), (release, r.group(1))
        release = r.group(1)
    types = ast.literal_eval(re.search(r"openapi_types = (\{.*?\})\n", src, re.S).group(1))
    names = ast.literal_eval(re.search(r"attribute_map = (\{.*?\})\n", src, re.S).group(1))
    required = re.findall(r"client_side_validation and (\w+) is None:  # noqa: E501\n\s+raise ValueError", src)
    classes[m.group(1)] = (types, names, required)


def schema(t):
    simple = {"str": {"type": "string"}, "int": {"type": "integer"}, "bool": {"type": "boolean"},
              "float": {"type": "number"}, "datetime": {"type": "string", "format": "date-time"},
              # IntOrString, RawExtension: any value.
              "object": {}}
    if t in simple:
        return simple[t]
    m = re.fullmatch(r"list\[(.*)\]", t)
    if m:
        return {"type": "array", "items": schema(m.group(1))}
    m = re.fullmatch(r"dict\(str, (.*)\)", t)
    if m:
        return {"type": "object", "additionalProperties": schema(m.group(1))}
    assert t in classes, t
    return {"$ref": "#/definitions/" + t}


def closure(name, seen):
    if name in seen:
        return
    seen.add(name)
    for t in classes[name][0].values():
        # Whole names: `list[CoreV1ResourceClaim]` names CoreV1ResourceClaim, not V1ResourceClaim.
        for n in re.findall(r"[A-Za-z_]\w*", t):
            if n in classes:
                closure(n, seen)


needed = set()
for root in ROOTS:
    closure(root, needed)
definitions = {}
for name in sorted(needed):
    types, names, required = classes[name]
    s = {"type": "object", "properties": {names[a]: schema(t) for a, t in types.items()}}
    if required:
        s["required"] = sorted(names[a] for a in required)
    if name in ROOTS:
        g, v, k = ROOTS[name]
        s["x-kubernetes-group-version-kind"] = [{"group": g, "kind": k, "version": v}]
    definitions[name] = s
doc = {
    "swagger": "2.0",
    "info": {"title": "Kubernetes", "version": f"{release} (Python client kubernetes {version} models)"},
    "paths": {},
    "definitions": definitions,
}
with open(OUT, "w") as f:
    json.dump(doc, f, indent=1, sort_keys=True)
    f.write("\n")
print(f"{OUT}: {len(definitions)} definitions from {release}")
