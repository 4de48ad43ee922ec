"""Load terraform/*.tf with python-hcl2 and check the deployment's pins.

Every check is a plain function that raises AssertionError with a message;
test_infra_terraform.py runs them on the real configuration and
test_infra_mutations.py runs them on broken copies to prove each one can fail.

python-hcl2 (8.x) keeps HCL's spelling: string literals come back quoted
('"nvidia-l4"'), expressions wrapped ('${var.region}'), block labels quoted,
and blocks as lists of dicts with "__is_block__"/"__comments__" markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import hcl2

REPO = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = REPO / "terraform"

GPU_REGIONS = {"us-central1", "us-east4", "europe-west1", "europe-west4", "asia-southeast1"}
PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")
SERVICE_TYPE = "google_cloud_run_v2_service"
JOB_TYPE = "google_cloud_run_v2_job"
# Cloud Run GPU tasks run for at most an hour.
GPU_TASK_TIMEOUT_S = 3600
# The GPUs Cloud Run offers and each one's minimum vCPU and memory (GiB), from Cloud Run's GPU
# documentation: "For L4 GPUs, you must use a minimum of 4 CPU and 16 GiB of memory"; "For NVIDIA
# RTX PRO 6000 Blackwell GPU, you must use a minimum of 20 CPU and 80 GiB of memory".
GPU_MINIMUMS = {"nvidia-l4": (4, 16), "nvidia-rtx-pro-6000": (20, 80)}
DEFAULT_GPU = "nvidia-l4"


# ---------------------------------------------------------------------------
# Parsing and value helpers
# ---------------------------------------------------------------------------


def unquote(value: Any) -> Any:
    """'"abc"' -> 'abc' (with \\" unescaped); anything else unchanged."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value


def expression(value: Any) -> str | None:
    """'${var.region}' -> 'var.region'; None for anything that is not a bare expression."""
    if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
        return value[2:-1].strip()
    return None


def strip_markers(value: Any) -> Any:
    """Drop python-hcl2's __is_block__/__comments__ keys and unquote keys, recursively."""
    if isinstance(value, dict):
        return {unquote(k): strip_markers(v) for k, v in value.items() if not str(k).startswith("__")}
    if isinstance(value, list):
        return [strip_markers(v) for v in value]
    return value


def only_block(body: dict, name: str) -> dict:
    """The single nested block `name` of body (blocks parse as one-element lists)."""
    blocks = body.get(name)
    assert isinstance(blocks, list) and len(blocks) == 1, f"expected exactly one `{name}` block, found {blocks!r}"
    return blocks[0]


@dataclass
class TerraformConfig:
    directory: Path
    resources: dict[tuple[str, str], dict] = field(default_factory=dict)
    data: dict[tuple[str, str], dict] = field(default_factory=dict)
    variables: dict[str, dict] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, dict] = field(default_factory=dict)
    providers: dict[str, dict] = field(default_factory=dict)
    terraform: list[dict] = field(default_factory=list)

    # -- lookups -----------------------------------------------------------

    def resources_of(self, rtype: str) -> dict[str, dict]:
        return {name: body for (t, name), body in self.resources.items() if t == rtype}

    def service(self) -> dict:
        services = self.resources_of(SERVICE_TYPE)
        assert len(services) == 1, f"expected one {SERVICE_TYPE}, found {sorted(services)}"
        return next(iter(services.values()))

    def template(self) -> dict:
        return only_block(self.service(), "template")

    def container(self) -> dict:
        containers = self.template().get("containers")
        assert isinstance(containers, list) and len(containers) == 1, "expected exactly one container"
        return containers[0]

    def job(self) -> dict:
        jobs = self.resources_of(JOB_TYPE)
        assert len(jobs) == 1, f"expected one {JOB_TYPE} (the backfill job), found {sorted(jobs)}"
        return next(iter(jobs.values()))

    def task_template(self) -> dict:
        """template.template of the job: what every task runs."""
        return only_block(only_block(self.job(), "template"), "template")

    def variable_default(self, name: str) -> Any:
        assert name in self.variables, f"variable {name!r} is not declared"
        assert "default" in self.variables[name], f"variable {name!r} has no default"
        return self.resolve(self.variables[name]["default"])

    def resolve(self, value: Any, _depth: int = 0) -> Any:
        """Literal value of `value`, following var.X to its default and local.X to its value."""
        assert _depth < 10, f"reference loop resolving {value!r}"
        expr = expression(value)
        if expr is None:
            return unquote(value)
        if m := re.fullmatch(r"var\.([A-Za-z0-9_]+)", expr):
            return self.variable_default(m.group(1))
        if m := re.fullmatch(r"local\.([A-Za-z0-9_]+)", expr):
            assert m.group(1) in self.locals, f"local {m.group(1)!r} is not defined"
            return self.resolve(self.locals[m.group(1)], _depth + 1)
        return value

    def walk(self) -> Iterator[tuple[str, Any]]:
        """(path, value) for every leaf value in resources, data sources, locals and variable defaults."""
        roots: list[tuple[str, Any]] = [(f"resource.{t}.{n}", b) for (t, n), b in self.resources.items()]
        roots += [(f"data.{t}.{n}", b) for (t, n), b in self.data.items()]
        roots += [(f"local.{k}", v) for k, v in self.locals.items()]
        roots += [(f"var.{k}.default", v["default"]) for k, v in self.variables.items() if "default" in v]
        stack = list(roots)
        while stack:
            path, value = stack.pop()
            if isinstance(value, dict):
                stack.extend((f"{path}.{k}", v) for k, v in value.items())
            elif isinstance(value, list):
                stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
            else:
                yield path, value


def load(directory: Path = TERRAFORM_DIR) -> TerraformConfig:
    cfg = TerraformConfig(directory=directory)
    files = sorted(directory.glob("*.tf"))
    assert files, f"no .tf files in {directory}"
    for path in files:
        with path.open() as fh:
            doc = strip_markers(hcl2.load(fh))
        for block in doc.get("resource", []):
            for rtype, named in block.items():
                for name, body in named.items():
                    assert (rtype, name) not in cfg.resources, f"duplicate resource {rtype}.{name}"
                    cfg.resources[(rtype, name)] = body
        for block in doc.get("data", []):
            for dtype, named in block.items():
                for name, body in named.items():
                    cfg.data[(dtype, name)] = body
        for block in doc.get("variable", []):
            for name, body in block.items():
                assert name not in cfg.variables, f"duplicate variable {name}"
                cfg.variables[name] = body
        for block in doc.get("locals", []):
            cfg.locals.update(block)
        for block in doc.get("output", []):
            cfg.outputs.update(block)
        for block in doc.get("provider", []):
            cfg.providers.update(block)
        cfg.terraform.extend(doc.get("terraform", []))
    return cfg


def validation_conditions(cfg: TerraformConfig, variable: str) -> list[str]:
    body = cfg.variables.get(variable)
    assert body is not None, f"variable {variable!r} is not declared"
    conditions = [expression(v.get("condition")) or "" for v in body.get("validation", [])]
    assert conditions, f"variable {variable!r} has no validation block"
    return conditions


def validation_regexes(cfg: TerraformConfig, variable: str) -> list[re.Pattern]:
    """The regex(...) patterns used in a variable's validation conditions."""
    patterns = []
    for cond in validation_conditions(cfg, variable):
        for raw in re.findall(r'regex\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*var\.' + re.escape(variable) + r"\s*\)", cond):
            patterns.append(re.compile(raw.replace("\\\\", "\\")))
    return patterns


def quantity_gi(value: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Gi|Mi)", str(value))
    assert m, f"memory {value!r} is not written in Gi or Mi"
    return float(m.group(1)) / (1024 if m.group(2) == "Mi" else 1)


_CONDITION_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<ref>(?:var|local)\.[A-Za-z0-9_]+)'
    r"|(?P<op>&&|\|\||==|!=|!|\(|\)|\[|\]|,)|(?P<word>true|false|null|contains)\b)"
)


def evaluate_condition(cfg: TerraformConfig, value: Any, env: dict[str, Any]) -> Any:
    """The value of an HCL condition with the variables in `env` (var.X -> env["X"]) and local.X
    followed to its definition. Understands string literals, true/false/null, !, &&, ||, ==, !=,
    parentheses, lists and contains(list, value), with HCL's precedence; anything else (a function,
    an interpolated string, a variable missing from env) fails the check rather than being guessed at,
    so a condition a check cannot read never passes it."""
    if isinstance(value, bool):
        return value
    expr = expression(value)
    assert expr is not None, f"condition {value!r} is not an expression"
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = _CONDITION_TOKEN.match(expr, pos)
        assert m and m.end() > pos, f"cannot evaluate {expr!r} (at {expr[pos:]!r})"
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    at = 0

    def peek() -> tuple[str, str] | None:
        return tokens[at] if at < len(tokens) else None

    def take(text: str | None = None) -> tuple[str, str]:
        nonlocal at
        token = peek()
        assert token is not None and (text is None or token[1] == text), f"cannot evaluate {expr!r}: expected {text!r}"
        at += 1
        return token

    def or_expr() -> Any:
        left = and_expr()
        while peek() == ("op", "||"):
            take()
            right = and_expr()
            left = bool(left) or bool(right)
        return left

    def and_expr() -> Any:
        left = eq_expr()
        while peek() == ("op", "&&"):
            take()
            right = eq_expr()
            left = bool(left) and bool(right)
        return left

    def eq_expr() -> Any:
        left = unary()
        if peek() in (("op", "=="), ("op", "!=")):
            op = take()[1]
            right = unary()
            return (left == right) if op == "==" else (left != right)
        return left

    def unary() -> Any:
        if peek() == ("op", "!"):
            take()
            operand = unary()
            assert isinstance(operand, bool), f"cannot evaluate {expr!r}: ! of {operand!r}"
            return not operand
        return primary()

    def items() -> list:
        take("[")
        out = []
        while peek() != ("op", "]"):
            out.append(or_expr())
            if peek() == ("op", ","):
                take()
        take("]")
        return out

    def primary() -> Any:
        kind, text = peek() or ("", "")
        if kind == "str":
            take()
            assert "${" not in text, f"cannot evaluate the interpolated string {text!r}"
            return unquote(text)
        if kind == "word" and text == "contains":
            take()
            take("(")
            listed = items() if peek() == ("op", "[") else primary()
            take(",")
            needle = or_expr()
            take(")")
            assert isinstance(listed, list), f"cannot evaluate {expr!r}: contains() of {listed!r}"
            return needle in listed
        if kind == "word":
            take()
            return {"true": True, "false": False, "null": None}[text]
        if kind == "ref":
            take()
            scope, name = text.split(".", 1)
            if scope == "var":
                assert name in env, f"condition {expr!r} reads var.{name}, which this check does not vary"
                return env[name]
            assert name in cfg.locals, f"local {name!r} is not defined"
            return evaluate_condition(cfg, cfg.locals[name], env)
        if (kind, text) == ("op", "("):
            take()
            inner = or_expr()
            take(")")
            return inner
        if (kind, text) == ("op", "["):
            return items()
        raise AssertionError(f"cannot evaluate {expr!r} at {text!r}")

    result = or_expr()
    assert at == len(tokens), f"cannot evaluate {expr!r}: {tokens[at:]!r} left over"
    return result


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


def check_provider_pinned(cfg: TerraformConfig) -> None:
    found = None
    for block in cfg.terraform:
        for providers in block.get("required_providers", []):
            if "google" in providers:
                found = providers["google"]
    assert found is not None, "terraform.required_providers has no google entry"
    assert unquote(found.get("source")) == "hashicorp/google", f"google provider source is {found.get('source')!r}"
    version = unquote(found.get("version", ""))
    assert re.fullmatch(r"(~>\s*\d+\.\d+(\.\d+)?|=?\s*\d+\.\d+\.\d+)", version), (
        f"google provider must be pinned with ~> MAJOR.MINOR or an exact version, not {version!r}"
    )


def check_concurrency_is_two(cfg: TerraformConfig) -> None:
    value = cfg.resolve(cfg.template().get("max_instance_request_concurrency"))
    assert value == 2, f"max_instance_request_concurrency is {value!r}, must be 2"


def check_single_region_variable(cfg: TerraformConfig) -> None:
    region_vars = [name for name in cfg.variables if "region" in name or "location" in name]
    assert region_vars == ["region"], f"expected exactly one region variable named `region`, found {region_vars}"
    service = cfg.service()
    assert expression(service.get("location")) == "var.region", (
        f"service location is {service.get('location')!r}, must be var.region"
    )
    photos = cfg.resources_of("google_storage_bucket").get("photos")
    assert photos is not None, "google_storage_bucket.photos is missing"
    assert expression(photos.get("location")) == "var.region", (
        f"photo bucket location is {photos.get('location')!r}, must be var.region"
    )
    # Nothing else may pick a location of its own.
    allowed = {"var.region", f"{SERVICE_TYPE}.clipfn.location"}
    for (rtype, name), body in cfg.resources.items():
        if "location" in body:
            assert expression(body["location"]) in allowed, (
                f"{rtype}.{name}.location is {body['location']!r}; every location must come from var.region"
            )
    provider = cfg.providers.get("google", {})
    assert expression(provider.get("region")) == "var.region", "provider google's region must be var.region"


def check_region_validation(cfg: TerraformConfig) -> None:
    conditions = validation_conditions(cfg, "region")
    listed: set[str] = set()
    for cond in conditions:
        m = re.search(r"contains\(\s*\[([^\]]*)\]\s*,\s*var\.region\s*\)", cond)
        if m:
            listed |= set(re.findall(r'"([^"]+)"', m.group(1)))
    assert listed == GPU_REGIONS, f"region validation allows {sorted(listed)}, must be exactly {sorted(GPU_REGIONS)}"
    default = cfg.variable_default("region")
    assert default in GPU_REGIONS, f"region default {default!r} is not a Cloud Run GPU region"


def check_gpu_l4_one(cfg: TerraformConfig) -> None:
    selector = only_block(cfg.template(), "node_selector")
    assert expression(selector.get("accelerator")) == "var.gpu_type", (
        f"node_selector.accelerator is {selector.get('accelerator')!r}, must be var.gpu_type"
    )
    accelerator = cfg.resolve(selector.get("accelerator"))
    assert accelerator == DEFAULT_GPU, f"the default GPU is {accelerator!r}, must be {DEFAULT_GPU}"
    limits = only_block(cfg.container(), "resources").get("limits", {})
    gpus = cfg.resolve(limits.get("nvidia.com/gpu"))
    assert str(gpus) == "1", f'limits["nvidia.com/gpu"] is {gpus!r}, must be "1"'


def _gpu_minimums(cfg: TerraformConfig) -> dict[str, tuple[float, float]]:
    table = cfg.locals.get("gpu_minimums")
    assert isinstance(table, dict), f"local.gpu_minimums must be a map of GPU type to {{cpu, memory_gi}}, is {table!r}"
    out = {}
    for gpu, mins in table.items():
        assert isinstance(mins, dict), f"local.gpu_minimums[{gpu!r}] is {mins!r}"
        out[unquote(gpu)] = (float(cfg.resolve(mins.get("cpu"))), float(cfg.resolve(mins.get("memory_gi"))))
    return out


def check_gpu_type_minimums(cfg: TerraformConfig) -> None:
    """var.gpu_type picks one of Cloud Run's two GPUs, and var.cpu / var.memory are checked against
    that GPU's minimum before the service or the job is created (a precondition on each)."""
    listed: set[str] = set()
    for cond in validation_conditions(cfg, "gpu_type"):
        m = re.search(r"contains\(\s*\[([^\]]*)\]\s*,\s*var\.gpu_type\s*\)", cond)
        if m:
            listed |= set(re.findall(r'"([^"]+)"', m.group(1)))
    assert listed == set(GPU_MINIMUMS), f"gpu_type validation allows {sorted(listed)}, must be {sorted(GPU_MINIMUMS)}"
    assert cfg.variable_default("gpu_type") == DEFAULT_GPU, f"gpu_type must default to {DEFAULT_GPU}"
    table = _gpu_minimums(cfg)
    assert set(table) == set(GPU_MINIMUMS), f"local.gpu_minimums covers {sorted(table)}, must be {sorted(GPU_MINIMUMS)}"
    for gpu, (cpu, memory) in GPU_MINIMUMS.items():
        assert table[gpu][0] >= cpu, f"{gpu}: minimum cpu {table[gpu][0]} is below Cloud Run's {cpu}"
        assert table[gpu][1] >= memory, f"{gpu}: minimum memory {table[gpu][1]}Gi is below Cloud Run's {memory}Gi"
    assert expression(cfg.locals.get("gpu_minimum")) == "local.gpu_minimums[var.gpu_type]", (
        f"local.gpu_minimum is {cfg.locals.get('gpu_minimum')!r}, must be local.gpu_minimums[var.gpu_type]"
    )
    ok = re.sub(r"\s+", " ", expression(cfg.locals.get("gpu_sizing_ok")) or "")
    want = ('tonumber(var.cpu) >= local.gpu_minimum.cpu && '
            'tonumber(trimsuffix(var.memory, "Gi")) >= local.gpu_minimum.memory_gi')
    assert ok == want, f"local.gpu_sizing_ok is {ok!r}, must be {want!r}"
    # Both consumers of var.cpu / var.memory refuse a size below the GPU's minimum.
    task = cfg.task_template()
    for what, resource, selector in (("service", cfg.service(), only_block(cfg.template(), "node_selector")),
                                     ("backfill job", cfg.job(), only_block(task, "node_selector"))):
        assert expression(selector.get("accelerator")) == "var.gpu_type", f"the {what}'s accelerator must be var.gpu_type"
        lifecycle = only_block(resource, "lifecycle")
        preconditions = lifecycle.get("precondition") or []
        assert any(expression(p.get("condition")) == "local.gpu_sizing_ok" for p in preconditions), (
            f"the {what} needs a precondition on local.gpu_sizing_ok"
        )
    # The validations let every GPU's minimum through (else that GPU could never be chosen).
    cpu_patterns = validation_regexes(cfg, "cpu")
    memory_patterns = validation_regexes(cfg, "memory")
    assert cpu_patterns and memory_patterns, "var.cpu and var.memory need regex validations"
    for gpu, (cpu, memory) in GPU_MINIMUMS.items():
        assert all(p.search(str(int(cpu))) for p in cpu_patterns), f"var.cpu validation rejects {gpu}'s minimum {cpu:g}"
        assert all(p.search(f"{int(memory)}Gi") for p in memory_patterns), (
            f"var.memory validation rejects {gpu}'s minimum {memory:g}Gi"
        )
    # The defaults fit the default GPU.
    cpu_default, memory_default = float(cfg.variable_default("cpu")), quantity_gi(cfg.variable_default("memory"))
    assert cpu_default >= table[DEFAULT_GPU][0] and memory_default >= table[DEFAULT_GPU][1], (
        f"the defaults ({cpu_default:g} CPU, {memory_default:g}Gi) are below the {DEFAULT_GPU} minimum"
    )


def check_min_instances_zero(cfg: TerraformConfig) -> None:
    scaling = only_block(cfg.template(), "scaling")
    minimum = cfg.resolve(scaling.get("min_instance_count"))
    assert minimum == 0, f"min_instance_count is {minimum!r}, must be 0 (scale to zero)"
    assert expression(scaling.get("max_instance_count")) == "var.max_instances", (
        "max_instance_count must come from var.max_instances"
    )
    assert cfg.variable_default("max_instances") >= 1


def check_cpu_memory(cfg: TerraformConfig) -> None:
    resources = only_block(cfg.container(), "resources")
    limits = resources.get("limits", {})
    cpu = cfg.resolve(limits.get("cpu"))
    memory = cfg.resolve(limits.get("memory"))
    assert float(cpu) >= 4, f"cpu limit {cpu!r} is below 4"
    assert quantity_gi(memory) >= 16, f"memory limit {memory!r} is below 16Gi"
    # When they are variables, their validation must keep them there.
    if expression(limits.get("cpu")) == "var.cpu":
        patterns = validation_regexes(cfg, "cpu")
        assert patterns, "var.cpu needs a regex validation"
        for bad in ("0", "1", "2", "3", "0.5", "4.5", "-4", "four", ""):
            assert not all(p.search(bad) for p in patterns), f"var.cpu validation accepts {bad!r}"
        for good in ("4", "8", "20", "32"):
            assert all(p.search(good) for p in patterns), f"var.cpu validation rejects {good!r}"
    if expression(limits.get("memory")) == "var.memory":
        patterns = validation_regexes(cfg, "memory")
        assert patterns, "var.memory needs a regex validation"
        for bad in ("512Mi", "8Gi", "15Gi", "1Gi", "16", "16G"):
            assert not any(p.search(bad) for p in patterns), f"var.memory validation accepts {bad!r}"
        for good in ("16Gi", "32Gi", "80Gi", "128Gi"):
            assert all(p.search(good) for p in patterns), f"var.memory validation rejects {good!r}"
    assert resources.get("cpu_idle") is False, "cpu_idle must be false: GPU services need CPU always allocated"
    assert resources.get("startup_cpu_boost") is True, "startup_cpu_boost must be true"


def check_startup_probe(cfg: TerraformConfig) -> None:
    container = cfg.container()
    probe = only_block(container, "startup_probe")
    http_get = only_block(probe, "http_get")
    path = cfg.resolve(http_get.get("path"))
    assert path == "/readyz", f"startup probe path is {path!r}, must be /readyz"
    port = cfg.resolve(http_get.get("port"))
    container_port = cfg.resolve(only_block(container, "ports").get("container_port"))
    assert port == container_port == 8080, f"startup probe port {port!r} / container port {container_port!r}"
    period = cfg.resolve(probe.get("period_seconds", 10))
    failures = cfg.resolve(probe.get("failure_threshold", 3))
    assert period * failures >= 60, "the startup probe must allow at least a minute for model load and warm-up"


# Attributes whose text may name allUsers (to say it is refused) without granting anything.
_PROSE_ATTRIBUTES = re.compile(r"^\s*(description|error_message)\s*=")


def check_no_public_members(cfg: TerraformConfig) -> None:
    """allUsers and allAuthenticatedUsers appear nowhere: not in a resource, data source, local,
    variable default or output, and not on any line of the .tf files or of terraform.tfvars.example
    outside comments, descriptions and validation messages."""
    for path, value in cfg.walk():
        if isinstance(value, str):
            for member in PUBLIC_MEMBERS:
                assert member not in value, f"{path} grants {member}: {value!r}"
    for name, body in cfg.outputs.items():
        for member in PUBLIC_MEMBERS:
            assert member not in str(body.get("value")), f"output {name} names {member}"
    files = sorted(cfg.directory.glob("*.tf")) + sorted(cfg.directory.glob("*.tfvars.example"))
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = re.sub(r"(^|\s)(#|//).*$", "", line)
            if _PROSE_ATTRIBUTES.match(code):
                continue
            for member in PUBLIC_MEMBERS:
                assert member not in code, f"{path.name}:{number} names {member}: {line.strip()!r}"


def check_invoker_is_backend(cfg: TerraformConfig) -> None:
    grants = []
    for (rtype, name), body in cfg.resources.items():
        role = cfg.resolve(body.get("role")) if "role" in body else None
        if role == "roles/run.invoker" or (rtype.startswith(f"{SERVICE_TYPE}_iam_") and rtype.endswith("_policy")):
            grants.append((rtype, name, body))
    assert len(grants) == 1, f"expected one roles/run.invoker grant, found {[(t, n) for t, n, _ in grants]}"
    rtype, name, body = grants[0]
    assert rtype == f"{SERVICE_TYPE}_iam_binding", (
        f"{rtype}.{name}: use {SERVICE_TYPE}_iam_binding so the backend is the only invoker"
    )
    members = body.get("members")
    assert isinstance(members, list) and [expression(m) for m in members] == ["var.backend_invoker_member"], (
        f"invoker members are {members!r}, must be [var.backend_invoker_member]"
    )
    assert expression(body.get("name")) == f"{SERVICE_TYPE}.clipfn.name", "the invoker binding must target the service"
    var = cfg.variables.get("backend_invoker_member")
    assert var is not None and "default" not in var, "backend_invoker_member must be declared without a default"
    patterns = validation_regexes(cfg, "backend_invoker_member")
    assert patterns, "backend_invoker_member needs a regex validation"
    for bad in PUBLIC_MEMBERS + ("", "backend@p.iam.gserviceaccount.com"):
        assert not all(p.search(bad) for p in patterns), f"backend_invoker_member validation accepts {bad!r}"
    good = "serviceAccount:backend@p.iam.gserviceaccount.com"
    assert all(p.search(good) for p in patterns), f"backend_invoker_member validation rejects {good!r}"
    disabled = cfg.service().get("invoker_iam_disabled")
    assert disabled is False or expression(disabled) == IMMICH_NETWORK_VAR, (
        f"invoker_iam_disabled is {disabled!r}: it must be false, or var.{IMMICH_NETWORK_VAR.split('.')[1]} "
        "(held to internal ingress, check_immich_network_access)"
    )
    assert cfg.resolve(disabled) is False, "by default the invoker IAM check must be on (invoker_iam_disabled = false)"


IMMICH_NETWORK_VAR = "var.immich_network_access"
INGRESS_VALUES = ("INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER")
# The one ingress under which the invoker check may be off. INTERNAL_LOAD_BALANCER is not one:
# it also admits external Application Load Balancers, so an unauthenticated service behind it is
# one load balancer away from the internet.
IAM_OFF_INGRESS = "INGRESS_TRAFFIC_INTERNAL_ONLY"


def check_immich_network_access(cfg: TerraformConfig) -> None:
    """Immich's client sends no credentials. The invoker IAM check may be off only through
    var.immich_network_access (a bool, false by default), and then only with internal ingress: the
    service's preconditions refuse every other ingress, so IAM off with INGRESS_TRAFFIC_ALL (or the
    load-balancer setting) cannot be planned, while the default (IAM on) plans with any ingress."""
    name = IMMICH_NETWORK_VAR.split(".")[1]
    var = cfg.variables.get(name)
    assert var is not None, f"variable {name!r} is not declared"
    assert var.get("type") == "bool", f"var.{name} must be a bool, is {var.get('type')!r}"
    assert cfg.variable_default(name) is False, f"var.{name} must default to false (the invoker IAM check on)"
    service = cfg.service()
    assert expression(service.get("invoker_iam_disabled")) == IMMICH_NETWORK_VAR, (
        f"invoker_iam_disabled is {service.get('invoker_iam_disabled')!r}, must be {IMMICH_NETWORK_VAR}"
    )
    assert expression(service.get("ingress")) == "var.ingress", (
        f"the service's ingress is {service.get('ingress')!r}; it must be var.ingress, which the precondition reads"
    )
    lifecycle = only_block(service, "lifecycle")
    guards = [p for p in lifecycle.get("precondition") or [] if IMMICH_NETWORK_VAR in str(p.get("condition"))]
    assert guards, f"the service needs a precondition on {IMMICH_NETWORK_VAR} and var.ingress"
    for guard in guards:
        assert unquote(guard.get("error_message", "")).strip(), "the precondition needs an error_message"
    # Every ingress the validation lets through, and one it does not, in case it is loosened.
    for ingress in INGRESS_VALUES + ("INGRESS_TRAFFIC_UNSPECIFIED",):
        for access in (False, True):
            env = {name: access, "ingress": ingress}
            planned = all(evaluate_condition(cfg, g.get("condition"), env) is True for g in guards)
            want = (not access) or ingress == IAM_OFF_INGRESS
            assert planned == want, (
                f"with {name} = {str(access).lower()} and ingress = {ingress} the precondition "
                f"{'passes' if planned else 'fails'}; it must {'pass' if want else 'fail'}"
            )
    out = cfg.outputs.get("immich_machine_learning_url")
    assert out is not None, "output immich_machine_learning_url is missing"
    value = re.sub(r"\s+", " ", expression(out.get("value")) or "")
    assert value == f"{IMMICH_NETWORK_VAR} ? {SERVICE_TYPE}.clipfn.uri : null", (
        f"immich_machine_learning_url is {out.get('value')!r}: the URL only where Immich may call it without a token"
    )


def check_runtime_identity_read_only(cfg: TerraformConfig) -> None:
    template = cfg.template()
    assert expression(template.get("service_account")) == "google_service_account.runtime.email", (
        "the service must run as google_service_account.runtime"
    )
    sa_refs = ("google_service_account.runtime", "local.runtime_sa")
    grants = []
    for (rtype, name), body in cfg.resources.items():
        members = [body.get("member")] + list(body.get("members") or [])
        if any(isinstance(m, str) and any(ref in m for ref in sa_refs) for m in members):
            grants.append((rtype, name, body))
    assert grants, "the runtime service account is granted nothing"
    for rtype, name, body in grants:
        assert rtype == "google_storage_bucket_iam_member", f"{rtype}.{name}: the runtime account gets bucket roles only"
        role = cfg.resolve(body.get("role"))
        assert role == "roles/storage.objectViewer", f"{rtype}.{name} grants {role!r}, must be read-only objectViewer"
    buckets = {expression(body.get("bucket")): body for _, _, body in grants}
    assert set(buckets) == {"google_storage_bucket.photos.name", "google_storage_bucket.models.name"}, (
        f"runtime account grants are on {sorted(buckets)}"
    )
    condition = only_block(buckets["google_storage_bucket.models.name"], "condition")
    check_model_grant(cfg, condition.get("expression"), "the service's")


MODEL_OBJECTS = "projects/_/buckets/${google_storage_bucket.models.name}/objects/${var.model_object}"


def check_model_grant(cfg: TerraformConfig, expression_value: Any, whose: str) -> None:
    """A model bucket grant reads the model object only, or, where model_object names a folder
    (ends in "/"), the objects under it and a list with that folder as prefix."""
    expr = unquote(expression_value)
    if m := re.fullmatch(r"\$\{local\.([A-Za-z0-9_]+)\}", expr):
        expr = unquote(cfg.locals.get(m.group(1), ""))
    objects = unquote(cfg.locals.get("model_objects", ""))
    expr = expr.replace("${local.model_objects}", objects)
    one = f'resource.name == \\"{MODEL_OBJECTS}\\"'
    assert one in expr, f"{whose} model grant must be limited to the model object, condition is {expr!r}"
    if "?" not in expr:
        assert expr == one, f"{whose} model grant reads more than the model object: {expr!r}"
        return
    assert expr.startswith('${endswith(var.model_object, "/") ? '), (
        f"{whose} model grant may widen to a folder only where model_object ends in '/': {expr!r}"
    )
    folder, single = expr.split(" : ")
    assert single.removesuffix("}") == f'"{one}"', f"{whose} one-object branch is {single!r}"
    assert f'resource.name.startsWith(\\"{MODEL_OBJECTS}\\")' in folder, (
        f"{whose} folder branch must read only under the folder: {folder!r}"
    )
    assert 'objectListPrefix\\", \\"\\").startsWith(\\"${var.model_object}\\")' in folder, (
        f"{whose} folder branch may list only with the folder as prefix: {folder!r}"
    )


def _env(cfg: TerraformConfig) -> dict[str, Any]:
    return {unquote(e.get("name")): e.get("value") for e in cfg.container().get("env", [])}


def check_model_and_store_env(cfg: TerraformConfig) -> None:
    env = _env(cfg)
    assert expression(env.get("CLIPFN_MODEL")) == "local.model_uri", "CLIPFN_MODEL must be local.model_uri"
    model_uri = unquote(cfg.locals.get("model_uri"))
    assert model_uri == "gs://${google_storage_bucket.models.name}/${var.model_object}", f"model_uri is {model_uri!r}"
    assert expression(env.get("CLIPFN_STORE")) == "local.photo_uri", "CLIPFN_STORE must be local.photo_uri"
    assert unquote(cfg.locals.get("photo_uri")) == "gs://${google_storage_bucket.photos.name}"
    assert "PORT" not in env, "Cloud Run sets PORT itself"


def check_private_sources_never_allowed(cfg: TerraformConfig) -> None:
    """CLIPFN_ALLOW_PRIVATE_SOURCES opens loopback and private networks to photo URLs: the deployment never
    sets it, and extra_env refuses it."""
    name = "CLIPFN_ALLOW_PRIVATE_SOURCES"
    assert name not in _env(cfg), f"the container sets {name}"
    defaults = {k: v.get("default") for k, v in cfg.variables.items()}
    for what, value in [("a resource", cfg.resources), ("a local", cfg.locals), ("a variable default", defaults)]:
        assert name not in str(value), f"{what} names {name}"
    example = cfg.directory / "terraform.tfvars.example"
    if example.exists():
        settings = [line for line in example.read_text().splitlines() if not line.lstrip().startswith("#")]
        assert not any(name in line for line in settings), f"terraform.tfvars.example sets {name}"
    refusal = f'!contains(keys(var.extra_env), "{name}")'
    conditions = validation_conditions(cfg, "extra_env")
    assert any(refusal in c for c in conditions), f"extra_env must be validated with {refusal}"


def check_gpu_zonal_redundancy_variable(cfg: TerraformConfig) -> None:
    template = cfg.template()
    assert expression(template.get("gpu_zonal_redundancy_disabled")) == "var.gpu_zonal_redundancy_disabled", (
        "gpu_zonal_redundancy_disabled must come from its variable"
    )
    var = cfg.variables.get("gpu_zonal_redundancy_disabled")
    assert var is not None and var.get("type") == "bool", "var.gpu_zonal_redundancy_disabled must be a bool"


def check_artifact_registry_output(cfg: TerraformConfig) -> None:
    repos = cfg.resources_of("google_artifact_registry_repository")
    assert len(repos) == 1, f"expected one Artifact Registry repository, found {sorted(repos)}"
    (name, repo), = repos.items()
    assert unquote(repo.get("format")) == "DOCKER"
    out = cfg.outputs.get("artifact_registry_url")
    assert out is not None, "output artifact_registry_url is missing"
    value = unquote(out.get("value"))
    assert f"google_artifact_registry_repository.{name}." in value and "-docker.pkg.dev/" in value, (
        f"artifact_registry_url is {value!r}"
    )


def check_buckets_private(cfg: TerraformConfig) -> None:
    for name, body in cfg.resources_of("google_storage_bucket").items():
        assert body.get("uniform_bucket_level_access") is True, f"bucket {name}: uniform_bucket_level_access"
        assert unquote(body.get("public_access_prevention")) == "enforced", f"bucket {name}: public_access_prevention"
    for rtype in ("google_storage_object_access_control", "google_storage_default_object_access_control"):
        assert not cfg.resources_of(rtype), f"{rtype} needs fine-grained ACLs; use bucket IAM"


def _grants_to(cfg: TerraformConfig, refs: tuple[str, ...]) -> list[tuple[str, str, dict]]:
    """Every resource that grants something to a member mentioning one of `refs`."""
    grants = []
    for (rtype, name), body in cfg.resources.items():
        members = [body.get("member")] + list(body.get("members") or [])
        if any(isinstance(m, str) and any(ref in m for ref in refs) for m in members):
            grants.append((rtype, name, body))
    return grants


def check_backfill_job_gpu_task(cfg: TerraformConfig) -> None:
    job = cfg.job()
    assert expression(job.get("location")) == "var.region", f"job location is {job.get('location')!r}, must be var.region"
    outer = only_block(job, "template")
    for field_name, var in (("task_count", "backfill_task_count"), ("parallelism", "backfill_parallelism")):
        assert expression(outer.get(field_name)) == f"var.{var}", f"job template.{field_name} must come from var.{var}"
    task = cfg.task_template()
    assert expression(task.get("max_retries")) == "var.backfill_max_retries", "max_retries must come from its variable"
    assert expression(task.get("gpu_zonal_redundancy_disabled")) == "var.gpu_zonal_redundancy_disabled", (
        "the job's gpu_zonal_redundancy_disabled must come from the same variable as the service's"
    )
    accelerator = only_block(task, "node_selector").get("accelerator")
    assert expression(accelerator) == "var.gpu_type", f"job node_selector.accelerator is {accelerator!r}, must be var.gpu_type"
    containers = task.get("containers")
    assert isinstance(containers, list) and len(containers) == 1, "the job needs exactly one container"
    container = containers[0]
    assert container.get("image") == cfg.container().get("image"), "the job must run the service's image"
    gpus = cfg.resolve(only_block(container, "resources").get("limits", {}).get("nvidia.com/gpu"))
    assert str(gpus) == "1", f'job limits["nvidia.com/gpu"] is {gpus!r}, must be "1"'
    args = cfg.resolve(container.get("args"))
    if expression(container.get("args")) == "local.backfill_args":
        args = unquote(cfg.locals.get("backfill_args"))
    assert isinstance(args, str) and '["backfill"]' in args.replace(" ", ""), f"the job must run clipfn backfill, args {args!r}"
    timeout = unquote(task.get("timeout"))
    m = re.fullmatch(r"\$\{var\.([a-z_]+)\}s", str(timeout)) or re.fullmatch(r"(\d+)s", str(timeout))
    assert m, f"job task timeout {timeout!r} must be written as N s or ${{var.X}}s"
    if m.group(1).isdigit():
        seconds = [int(m.group(1))]
    else:
        seconds = [cfg.variable_default(m.group(1))]
        caps = [int(c) for cond in validation_conditions(cfg, m.group(1))
                for c in re.findall(r"var\." + m.group(1) + r"\s*<=\s*(\d+)", cond)]
        assert caps and min(caps) <= GPU_TASK_TIMEOUT_S, f"var.{m.group(1)} needs a validation capping it at 3600"
    assert all(s <= GPU_TASK_TIMEOUT_S for s in seconds), f"job task timeout {seconds} s is over 3600 s"
    env = {unquote(e.get("name")): e.get("value") for e in container.get("env", [])}
    assert expression(env.get("CLIPFN_MODEL")) == "local.model_uri", "the job's CLIPFN_MODEL must be local.model_uri"
    assert expression(env.get("CLIPFN_STORE")) == "local.photo_uri", "the job's CLIPFN_STORE must be local.photo_uri"


def check_backfill_identity(cfg: TerraformConfig) -> None:
    task = cfg.task_template()
    account = expression(task.get("service_account"))
    assert account and account.startswith("google_service_account.") and account.endswith(".email"), (
        f"the job's service_account is {task.get('service_account')!r}"
    )
    sa_name = account.split(".")[1]
    assert sa_name != "runtime", "the job needs its own service account, not the service's"
    refs = (f"google_service_account.{sa_name}", "local.backfill_sa")
    grants = _grants_to(cfg, refs)
    roles = {}
    for rtype, name, body in grants:
        assert rtype == "google_storage_bucket_iam_member", f"{rtype}.{name}: the backfill account gets bucket roles only"
        role = cfg.resolve(body.get("role"))
        bucket = expression(body.get("bucket"))
        conditions = body.get("condition") or []
        expr = unquote(conditions[0].get("expression")) if conditions else ""
        roles.setdefault((bucket, role), []).append(expr)
    photos, models = "google_storage_bucket.photos.name", "google_storage_bucket.models.name"
    assert set(roles) == {
        (photos, "roles/storage.objectViewer"),
        (photos, "roles/storage.objectCreator"),
        (models, "roles/storage.objectViewer"),
    }, f"backfill account grants are {sorted(roles)}: read photos, create under the output prefix, read the model"
    (writer,) = roles[(photos, "roles/storage.objectCreator")]
    assert writer.startswith("resource.name.startsWith(") and "/objects/${var.backfill_output_prefix}/" in writer, (
        f"the output grant must be limited to the output prefix, condition is {writer!r}"
    )
    (model,) = roles[(models, "roles/storage.objectViewer")]
    check_model_grant(cfg, model, "the job's")
    out = unquote(cfg.locals.get("backfill_out_uri", ""))
    assert out == "gs://${google_storage_bucket.photos.name}/${var.backfill_output_prefix}", (
        f"backfill_out_uri is {out!r}; it must be the prefix the writer grant covers"
    )


ALL_CHECKS = [
    check_provider_pinned,
    check_concurrency_is_two,
    check_single_region_variable,
    check_region_validation,
    check_gpu_l4_one,
    check_gpu_type_minimums,
    check_min_instances_zero,
    check_cpu_memory,
    check_startup_probe,
    check_no_public_members,
    check_invoker_is_backend,
    check_immich_network_access,
    check_runtime_identity_read_only,
    check_model_and_store_env,
    check_private_sources_never_allowed,
    check_gpu_zonal_redundancy_variable,
    check_artifact_registry_output,
    check_buckets_private,
    check_backfill_job_gpu_task,
    check_backfill_identity,
]
