"""The Terraform pins of the Cloud Run GPU deployment (terraform/*.tf)."""

from __future__ import annotations

import pytest

import infra_tf


@pytest.mark.parametrize("check", infra_tf.ALL_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_terraform_pin(tf, check):
    check(tf)


def test_tfvars_example_names_declared_variables(tf, repo):
    import hcl2

    with (repo / "terraform" / "terraform.tfvars.example").open() as fh:
        example = infra_tf.strip_markers(hcl2.load(fh))
    unknown = sorted(set(example) - set(tf.variables))
    assert not unknown, f"terraform.tfvars.example sets undeclared variables {unknown}"
    required = {name for name, body in tf.variables.items() if "default" not in body}
    missing = sorted(required - set(example))
    assert not missing, f"terraform.tfvars.example leaves required variables unset: {missing}"
    assert infra_tf.unquote(example["region"]) in infra_tf.GPU_REGIONS
    member = infra_tf.unquote(example["backend_invoker_member"])
    assert not any(p in member for p in infra_tf.PUBLIC_MEMBERS)


def test_every_resource_references_resolve(tf):
    """var.X and local.X used anywhere are declared (terraform validate would catch it; we have no terraform)."""
    import re

    used_vars, used_locals = set(), set()
    for _, value in tf.walk():
        if isinstance(value, str):
            used_vars |= set(re.findall(r"\bvar\.([A-Za-z0-9_]+)", value))
            used_locals |= set(re.findall(r"\blocal\.([A-Za-z0-9_]+)", value))
    for out in tf.outputs.values():
        used_vars |= set(re.findall(r"\bvar\.([A-Za-z0-9_]+)", str(out)))
        used_locals |= set(re.findall(r"\blocal\.([A-Za-z0-9_]+)", str(out)))
    assert used_vars - set(tf.variables) == set(), f"undeclared variables: {sorted(used_vars - set(tf.variables))}"
    assert used_locals - set(tf.locals) == set(), f"undefined locals: {sorted(used_locals - set(tf.locals))}"
    unused = sorted(set(tf.variables) - used_vars - {"project_id"})
    assert not unused, f"declared but unused variables: {unused}"


def test_condition_evaluator_reads_hcl(tf):
    """evaluate_condition (check_immich_network_access's truth table) follows HCL's precedence and
    refuses what it cannot read, so a condition it misreads cannot pass a check."""
    import pytest

    def ev(text, **env):
        return infra_tf.evaluate_condition(tf, "${" + text + "}", env)

    assert ev("!var.a || var.b == \"x\"", a=True, b="x") is True
    assert ev("!var.a || var.b == \"x\"", a=True, b="y") is False
    assert ev("!var.a || var.b == \"x\"", a=False, b="y") is True
    assert ev("!var.a == false", a=True) is True  # (!a) == false, not !(a == false)
    assert ev("var.a && var.b || var.c", a=False, b=True, c=True) is True
    assert ev("var.a && (var.b || var.c)", a=False, b=True, c=True) is False
    assert ev("contains([\"p\", \"q\"], var.b)", b="q") is True
    assert ev("var.b != \"x\"", b="x") is False
    assert infra_tf.evaluate_condition(tf, True, {}) is True
    for unreadable in ("length(var.b) > 0", "var.b == \"${var.c}\"", "var.unknown", "var.a ||"):
        with pytest.raises(AssertionError):
            ev(unreadable, a=True, b="x", c="y")
