"""Each Terraform check must be able to fail.

Every case copies terraform/ to a temporary folder, breaks one pin with a text
substitution, and expects the check that guards that pin to raise. A check
that passes on the broken copy guards nothing.
"""

from __future__ import annotations

import re
import shutil

import pytest

import infra_tf

# (check, file, pattern, replacement): `pattern` is a regex that must match in
# `file`; its first match is replaced.
MUTATIONS = [
    ("provider_pinned", "versions.tf", r'version = "~> 7.0"', 'version = ">= 7.0"'),
    ("concurrency_is_two", "main.tf", r"max_instance_request_concurrency = 2", "max_instance_request_concurrency = 80"),
    ("concurrency_is_two", "main.tf", r"max_instance_request_concurrency = 2", "max_instance_request_concurrency = var.max_instances"),
    ("single_region_variable", "main.tf", r'(resource "google_storage_bucket" "photos" \{\n  name\s+= var.photo_bucket_name\n  location\s+=) var.region', r'\1 "US"'),
    ("single_region_variable", "main.tf", r'(resource "google_cloud_run_v2_service" "clipfn" \{\n  name\s+= var.service_name\n  location\s+=) var.region', r'\1 "us-central1"'),
    ("single_region_variable", "main.tf", r'(resource "google_artifact_registry_repository" "images" \{\n  location\s+=) var.region', r'\1 "us"'),
    ("single_region_variable", "variables.tf", r'variable "service_name" \{', 'variable "bucket_region" {\n  type = string\n}\n\nvariable "service_name" {'),
    ("region_validation", "variables.tf", r', "asia-southeast1"\]', "]"),
    ("region_validation", "variables.tf", r'"us-east4", ', '"us-east4", "us-west1", '),
    ("region_validation", "variables.tf", r'default     = "us-central1"', 'default     = "us-west1"'),
    ("gpu_l4_one", "main.tf", r'      accelerator = var.gpu_type', '      accelerator = "nvidia-tesla-t4"'),
    ("gpu_l4_one", "variables.tf", r'default     = "nvidia-l4"', 'default     = "nvidia-rtx-pro-6000"'),
    ("gpu_type_minimums", "variables.tf", r'contains\(\["nvidia-l4", "nvidia-rtx-pro-6000"\], var.gpu_type\)', 'contains(["nvidia-l4", "nvidia-rtx-pro-6000", "nvidia-tesla-t4"], var.gpu_type)'),
    ("gpu_type_minimums", "variables.tf", r', "nvidia-rtx-pro-6000"\], var.gpu_type', '], var.gpu_type'),
    ("gpu_type_minimums", "main.tf", r'"nvidia-rtx-pro-6000" = \{ cpu = 20,', '"nvidia-rtx-pro-6000" = { cpu = 8,'),
    ("gpu_type_minimums", "main.tf", r'memory_gi = 80 \}', 'memory_gi = 32 }'),
    ("gpu_type_minimums", "main.tf", r'"nvidia-l4"           = \{ cpu = 4, memory_gi = 16 \}', '"nvidia-l4"           = { cpu = 2, memory_gi = 8 }'),
    ("gpu_type_minimums", "main.tf", r'    "nvidia-rtx-pro-6000" = \{ cpu = 20, memory_gi = 80 \}\n', ''),
    ("gpu_type_minimums", "main.tf", r'gpu_minimum      = local.gpu_minimums\[var.gpu_type\]', 'gpu_minimum      = local.gpu_minimums["nvidia-l4"]'),
    ("gpu_type_minimums", "main.tf", r'tonumber\(var.cpu\) >= local.gpu_minimum.cpu &&', 'tonumber(var.cpu) >= 4 &&'),
    ("gpu_type_minimums", "main.tf", r'&& tonumber\(trimsuffix\(var.memory, "Gi"\)\) >= local.gpu_minimum.memory_gi', '|| tonumber(trimsuffix(var.memory, "Gi")) >= local.gpu_minimum.memory_gi'),
    ("gpu_type_minimums", "main.tf", r'(resource "google_cloud_run_v2_job" "backfill" \{(?:.|\n)*?)  lifecycle \{\n    precondition \{\n      condition     = local.gpu_sizing_ok\n      error_message = local.gpu_sizing_error\n    \}\n  \}\n', r'\1'),
    ("gpu_type_minimums", "main.tf", r'  lifecycle \{\n    precondition \{\n      condition     = local.gpu_sizing_ok', '  lifecycle {\n    precondition {\n      condition     = true'),
    ("gpu_type_minimums", "variables.tf", r'\^\(\[4-9\]\|\[1-9\]\[0-9\]\)\$', '^([4-9]|1[0-9])$'),
    ("gpu_type_minimums", "variables.tf", r'\^\(1\[6-9\]\|\[2-9\]\[0-9\]\|\[1-9\]\[0-9\]\[0-9\]\)Gi\$', '^(1[6-9]|[2-7][0-9])Gi$'),
    ("gpu_l4_one", "main.tf", r'"nvidia.com/gpu" = "1"', '"nvidia.com/gpu" = "2"'),
    ("min_instances_zero", "main.tf", r"min_instance_count = 0", "min_instance_count = 1"),
    ("cpu_memory", "variables.tf", r'default     = "4"', 'default     = "2"'),
    ("cpu_memory", "variables.tf", r'default     = "16Gi"', 'default     = "8Gi"'),
    ("cpu_memory", "variables.tf", r'\^\(\[4-9\]\|\[1-9\]\[0-9\]\)\$', "^([1-9]|[1-9][0-9])$"),
    ("cpu_memory", "variables.tf", r'\^\(1\[6-9\]\|\[2-9\]\[0-9\]\|\[1-9\]\[0-9\]\[0-9\]\)Gi\$', "^[0-9]+Gi$"),
    ("cpu_memory", "main.tf", r"cpu_idle          = false", "cpu_idle          = true"),
    ("cpu_memory", "main.tf", r"startup_cpu_boost = true", "startup_cpu_boost = false"),
    ("startup_probe", "main.tf", r'path = "/readyz"', 'path = "/healthz"'),
    ("startup_probe", "main.tf", r"(startup_probe \{(?:.|\n)*?port = )local.container_port", r"\g<1>9090"),
    ("no_public_members", "main.tf", r"members  = \[var.backend_invoker_member\]", 'members  = [var.backend_invoker_member, "allUsers"]'),
    ("no_public_members", "main.tf", r"member = local.runtime_sa", 'member = "allAuthenticatedUsers"'),
    ("no_public_members", "outputs.tf", r"\Z", '\noutput "public" {\n  value = "allUsers"\n}\n'),
    ("no_public_members", "terraform.tfvars.example", r'backend_invoker_member = "serviceAccount:[^"]*"', 'backend_invoker_member = "allUsers"'),
    ("no_public_members", "main.tf", r"\Z", '\nresource "google_cloud_run_v2_service_iam_member" "public" {\n  name   = google_cloud_run_v2_service.clipfn.name\n  role   = "roles/run.invoker"\n  member = "allUsers" # open to the internet\n}\n'),
    ("invoker_is_backend", "main.tf", r"members  = \[var.backend_invoker_member\]", 'members  = ["serviceAccount:someone@p.iam.gserviceaccount.com"]'),
    ("invoker_is_backend", "main.tf", r"google_cloud_run_v2_service_iam_binding", "google_cloud_run_v2_service_iam_member"),
    ("invoker_is_backend", "main.tf", r"invoker_iam_disabled = var.immich_network_access", "invoker_iam_disabled = true"),
    ("invoker_is_backend", "main.tf", r"invoker_iam_disabled = var.immich_network_access", "invoker_iam_disabled = var.backfill_incremental"),
    ("invoker_is_backend", "variables.tf", r'(variable "immich_network_access" \{(?:.|\n)*?default\s+=) false', r"\1 true"),
    ("invoker_is_backend", "main.tf", r"\Z", '\nresource "google_cloud_run_v2_service_iam_member" "extra" {\n  name   = google_cloud_run_v2_service.clipfn.name\n  role   = "roles/run.invoker"\n  member = "user:someone@example.com"\n}\n'),
    # Immich's credential-less client: IAM off only through the variable, only with internal ingress.
    ("immich_network_access", "variables.tf", r'variable "immich_network_access" \{(?:.|\n)*?\n\}\n\n', ""),
    ("immich_network_access", "variables.tf", r'(variable "immich_network_access" \{(?:.|\n)*?default\s+=) false', r"\1 true"),
    ("immich_network_access", "variables.tf", r'(variable "immich_network_access" \{(?:.|\n)*?type\s+=) bool', r"\1 string"),
    ("immich_network_access", "main.tf", r"invoker_iam_disabled = var.immich_network_access", "invoker_iam_disabled = true"),
    ("immich_network_access", "main.tf", r"invoker_iam_disabled = var.immich_network_access", "invoker_iam_disabled = false"),
    ("immich_network_access", "main.tf", r"ingress              = var.ingress", 'ingress              = "INGRESS_TRAFFIC_ALL"'),
    # The precondition removed, emptied, loosened to the load balancer setting or to anything but
    # ALL, turned around, made to refuse the default deployment, or written in terms the check
    # cannot evaluate (which fails it rather than passing).
    ("immich_network_access", "main.tf", r'    precondition \{\n      condition     = !var.immich_network_access(?:.|\n)*?\n    \}\n', ""),
    ("immich_network_access", "main.tf", r'condition     = !var.immich_network_access \|\| var.ingress == "INGRESS_TRAFFIC_INTERNAL_ONLY"', "condition     = true"),
    ("immich_network_access", "main.tf", r'condition     = !var.immich_network_access \|\| var.ingress == "INGRESS_TRAFFIC_INTERNAL_ONLY"', "condition     = !var.immich_network_access || true"),
    ("immich_network_access", "main.tf", r'var.ingress == "INGRESS_TRAFFIC_INTERNAL_ONLY"', 'var.ingress != "INGRESS_TRAFFIC_ALL"'),
    ("immich_network_access", "main.tf", r'var.ingress == "INGRESS_TRAFFIC_INTERNAL_ONLY"', 'contains(["INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.ingress)'),
    ("immich_network_access", "main.tf", r'!var.immich_network_access \|\| var.ingress ==', "var.immich_network_access || var.ingress =="),
    ("immich_network_access", "main.tf", r'!var.immich_network_access \|\| var.ingress ==', "!var.immich_network_access && var.ingress =="),
    ("immich_network_access", "main.tf", r'var.ingress == "INGRESS_TRAFFIC_INTERNAL_ONLY"', "length(var.ingress) > 0"),
    ("immich_network_access", "outputs.tf", r"value       = var.immich_network_access \? google_cloud_run_v2_service.clipfn.uri : null", "value       = google_cloud_run_v2_service.clipfn.uri"),
    ("invoker_is_backend", "variables.tf", r'\^\(serviceAccount\|user\|group\|principal\|principalSet\):\.\+', ".*"),
    ("runtime_identity_read_only", "main.tf", r'role   = "roles/storage.objectViewer"', 'role   = "roles/storage.objectAdmin"'),
    ("runtime_identity_read_only", "main.tf", r'/objects/\$\{var.model_object\}', "/objects/*"),
    ("runtime_identity_read_only", "main.tf", r'endswith\(var.model_object, "/"\) \?', "true ?"),
    ("runtime_identity_read_only", "main.tf", r'startsWith\(\\"\$\{var.model_object\}\\"\)', 'startsWith(\\"\\")'),
    ("runtime_identity_read_only", "main.tf", r'resource.name.startsWith\(\\"\$\{local.model_objects\}\\"\)', 'resource.name.startsWith(\\"projects/_/buckets/${google_storage_bucket.models.name}/\\")'),
    ("backfill_identity", "main.tf", r'(backfill_model_reader(?:.|\n)*?expression  = )local.model_read_condition', r'\1"true"'),
    ("runtime_identity_read_only", "main.tf", r"\Z", '\nresource "google_project_iam_member" "extra" {\n  project = var.project_id\n  role    = "roles/editor"\n  member  = local.runtime_sa\n}\n'),
    ("model_and_store_env", "main.tf", r'name  = "CLIPFN_STORE"\n        value = local.photo_uri', 'name  = "CLIPFN_STORE"\n        value = "file:///photos"'),
    ("model_and_store_env", "main.tf", r'model_uri  = "gs://', 'model_uri  = "s3://'),
    ("private_sources_never_allowed", "main.tf", r'(      env \{\n        name  = "RUST_LOG")', r'      env {\n        name  = "CLIPFN_ALLOW_PRIVATE_SOURCES"\n        value = "true"\n      }\n\1'),
    ("private_sources_never_allowed", "variables.tf", r'!contains\(keys\(var.extra_env\), "CLIPFN_ALLOW_PRIVATE_SOURCES"\)', "true"),
    ("private_sources_never_allowed", "variables.tf", r'default     = \{\}', 'default     = { CLIPFN_ALLOW_PRIVATE_SOURCES = "true" }'),
    ("private_sources_never_allowed", "terraform.tfvars.example", r"# \}\n\Z", '# }\nextra_env = { CLIPFN_ALLOW_PRIVATE_SOURCES = "true" }'),
    ("gpu_zonal_redundancy_variable", "main.tf", r"gpu_zonal_redundancy_disabled    = var.gpu_zonal_redundancy_disabled", "gpu_zonal_redundancy_disabled    = true"),
    ("artifact_registry_output", "outputs.tf", r'output "artifact_registry_url"', 'output "registry"'),
    ("buckets_private", "main.tf", r'public_access_prevention    = "enforced"', 'public_access_prevention    = "inherited"'),
    ("backfill_job_gpu_task", "main.tf", r'(resource "google_cloud_run_v2_job" "backfill" \{\n  name\s+= "\$\{var.service_name\}-backfill"\n  location\s+=) var.region', r'\1 "us-east4"'),
    ("backfill_job_gpu_task", "variables.tf", r"var.backfill_task_timeout_s <= 3600", "var.backfill_task_timeout_s <= 86400"),
    ("backfill_job_gpu_task", "variables.tf", r"(variable \"backfill_task_timeout_s\" \{(?:.|\n)*?default\s+=) 3600", r"\g<1> 7200"),
    ("backfill_job_gpu_task", "main.tf", r'timeout                       = "\$\{var.backfill_task_timeout_s\}s"', 'timeout                       = "86400s"'),
    ("backfill_job_gpu_task", "main.tf", r"(gpu_zonal_redundancy_disabled = )var.gpu_zonal_redundancy_disabled", r"\1false"),
    ("backfill_job_gpu_task", "main.tf", r"max_retries                   = var.backfill_max_retries", "max_retries                   = 3"),
    ("backfill_job_gpu_task", "main.tf", r"(task_count  = var.backfill_task_count\n    parallelism =) var.backfill_parallelism", r"\1 1"),
    ("backfill_job_gpu_task", "main.tf", r'(containers \{\n        image = )var.image\n        args', r'\1"gcr.io/other/image:latest"\n        args'),
    ("backfill_job_gpu_task", "main.tf", r'(node_selector \{\n        accelerator = )var.gpu_type', r'\1"nvidia-l4"'),
    ("backfill_identity", "main.tf", r"service_account = google_service_account.backfill.email", "service_account = google_service_account.runtime.email"),
    ("backfill_identity", "main.tf", r'role   = "roles/storage.objectCreator"', 'role   = "roles/storage.objectAdmin"'),
    ("backfill_identity", "main.tf", r'resource.name.startsWith\(\\"projects/_/buckets/\$\{google_storage_bucket.photos.name\}/objects/\$\{var.backfill_output_prefix\}/\\"\)', 'resource.name.startsWith(\\"projects/_/buckets/${google_storage_bucket.photos.name}/objects/\\")'),
    ("backfill_identity", "main.tf", r"\Z", '\nresource "google_project_iam_member" "backfill_extra" {\n  project = var.project_id\n  role    = "roles/storage.admin"\n  member  = local.backfill_sa\n}\n'),
]


def _checks():
    return {c.__name__.removeprefix("check_"): c for c in infra_tf.ALL_CHECKS}


def test_every_check_has_a_mutation():
    covered = {m[0] for m in MUTATIONS}
    assert set(_checks()) - covered == set(), f"checks never shown to fail: {sorted(set(_checks()) - covered)}"


@pytest.mark.parametrize(
    "check_name,filename,pattern,replacement",
    MUTATIONS,
    ids=[f"{m[0]}-{i}" for i, m in enumerate(MUTATIONS)],
)
def test_check_fails_on_broken_copy(tmp_path, check_name, filename, pattern, replacement):
    copy = tmp_path / "terraform"
    shutil.copytree(infra_tf.TERRAFORM_DIR, copy, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    target = copy / filename
    text = target.read_text()
    broken, count = re.subn(pattern, replacement, text, count=1)
    assert count == 1 and broken != text, f"mutation pattern {pattern!r} no longer matches {filename}"
    target.write_text(broken)

    check = _checks()[check_name]
    with pytest.raises(AssertionError):
        check(infra_tf.load(copy))
