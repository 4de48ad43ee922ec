# clipfn on Cloud Run with one NVIDIA GPU per instance (var.gpu_type: an L4 by default, or an
# RTX PRO 6000 Blackwell). See docs/deploy.md.
#
# Everything lives in var.region: the service, the photo bucket it reads, the
# model bucket and the image repository, so that photos and the model never
# cross regions on their way to the GPU.

locals {
  model_uri  = "gs://${google_storage_bucket.models.name}/${var.model_object}"
  photo_uri  = "gs://${google_storage_bucket.photos.name}"
  runtime_sa = "serviceAccount:${google_service_account.runtime.email}"

  # What the model grants let the service and the job read. One object: that object. A folder
  # (model_object ending in "/"): the objects under it, and listing the bucket only with the
  # folder as the list's prefix (listing is checked on the bucket, so its prefix is the only
  # handle a condition has; clipfn lists the folder to pick the precision's file).
  model_objects = "projects/_/buckets/${google_storage_bucket.models.name}/objects/${var.model_object}"
  model_read_condition = endswith(var.model_object, "/") ? join(" || ", [
    "resource.name.startsWith(\"${local.model_objects}\")",
    "(resource.name == \"projects/_/buckets/${google_storage_bucket.models.name}\" && api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${var.model_object}\"))",
  ]) : "resource.name == \"${local.model_objects}\""

  # Cloud Run's minimum vCPU and memory for each GPU type (its GPU documentation); the service
  # and the backfill job check var.cpu and var.memory against the one for var.gpu_type.
  gpu_minimums = {
    "nvidia-l4"           = { cpu = 4, memory_gi = 16 }
    "nvidia-rtx-pro-6000" = { cpu = 20, memory_gi = 80 }
  }
  gpu_minimum      = local.gpu_minimums[var.gpu_type]
  gpu_sizing_ok    = tonumber(var.cpu) >= local.gpu_minimum.cpu && tonumber(trimsuffix(var.memory, "Gi")) >= local.gpu_minimum.memory_gi
  gpu_sizing_error = "With gpu_type ${var.gpu_type}, Cloud Run needs cpu >= ${local.gpu_minimum.cpu} and memory >= ${local.gpu_minimum.memory_gi}Gi (set var.cpu and var.memory)."

  # Cloud Run serves the container's port through $PORT; clipfn listens there.
  container_port = 8080

  required_apis = [
    "artifactregistry.googleapis.com",
    "iam.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
  ]
}

resource "google_project_service" "required" {
  for_each = toset(local.required_apis)

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

# ---------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------

resource "google_artifact_registry_repository" "images" {
  location      = var.region
  repository_id = var.artifact_repository_id
  format        = "DOCKER"
  description   = "clipfn container images (Dockerfile.cuda)"
  labels        = var.labels

  depends_on = [google_project_service.required]
}

# ---------------------------------------------------------------------------
# Storage: photos and the model, both in var.region.
# ---------------------------------------------------------------------------

# The photos. Created here so that it is certain to share the service's
# region; an existing bucket in that region can be brought in with
# `terraform import google_storage_bucket.photos NAME` (docs/deploy.md).
resource "google_storage_bucket" "photos" {
  name                        = var.photo_bucket_name
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = var.labels

  depends_on = [google_project_service.required]
}

# The model gets a bucket of its own: bucket-level IAM with uniform access is
# the only supported way to grant on objects (object ACLs are off), and an IAM
# condition on a dedicated bucket can narrow the grant to the one model object.
resource "google_storage_bucket" "models" {
  name                        = var.model_bucket_name
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = var.labels

  versioning {
    enabled = true
  }

  depends_on = [google_project_service.required]
}

# Optional upload of a one-file model; otherwise (and for a folder, with
# `gcloud storage cp -r`) copy it to local.model_uri before the service starts
# (docs/deploy.md).
resource "google_storage_bucket_object" "model" {
  count = var.model_source_path == "" || endswith(var.model_object, "/") ? 0 : 1

  bucket       = google_storage_bucket.models.name
  name         = var.model_object
  source       = var.model_source_path
  content_type = "application/octet-stream"
}

# ---------------------------------------------------------------------------
# Runtime identity: read-only on the photos and on the model object, nothing
# else.
# ---------------------------------------------------------------------------

resource "google_service_account" "runtime" {
  account_id   = "${var.service_name}-run"
  display_name = "clipfn Cloud Run runtime"
  description  = "Reads photos from gs://${var.photo_bucket_name} and one model object; no other roles."

  depends_on = [google_project_service.required]
}

resource "google_storage_bucket_iam_member" "photos_reader" {
  bucket = google_storage_bucket.photos.name
  role   = "roles/storage.objectViewer"
  member = local.runtime_sa
}

# objects.get on exactly the model object (or, for a model folder, on the objects
# under it and a list of that folder): reading anything else in the bucket is denied.
resource "google_storage_bucket_iam_member" "model_reader" {
  bucket = google_storage_bucket.models.name
  role   = "roles/storage.objectViewer"
  member = local.runtime_sa

  condition {
    title       = "clipfn-model-object-only"
    description = "Read the ONNX model object (or model folder) and nothing else in the bucket."
    expression  = local.model_read_condition
  }
}

# ---------------------------------------------------------------------------
# The service
# ---------------------------------------------------------------------------

resource "google_cloud_run_v2_service" "clipfn" {
  name                 = var.service_name
  location             = var.region
  ingress              = var.ingress
  invoker_iam_disabled = var.immich_network_access # false (IAM on) unless immich_network_access: see the preconditions
  deletion_protection  = var.deletion_protection
  labels               = var.labels

  lifecycle {
    precondition {
      condition     = local.gpu_sizing_ok
      error_message = local.gpu_sizing_error
    }

    # With the invoker check off the network is the only boundary: internal ingress only.
    # INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER is refused too, because it also admits external
    # Application Load Balancers, and one pointed at the service would put it on the internet
    # without authentication. INGRESS_TRAFFIC_ALL would do so at once.
    precondition {
      condition     = !var.immich_network_access || var.ingress == "INGRESS_TRAFFIC_INTERNAL_ONLY"
      error_message = "immich_network_access = true turns Cloud Run's invoker IAM check off, so it needs ingress = \"INGRESS_TRAFFIC_INTERNAL_ONLY\" (requests from the project's VPC networks only); ingress ${var.ingress} would let unauthenticated requests in from outside the VPC. To keep IAM on instead, leave immich_network_access = false and put an ID-token proxy beside Immich (docs/deploy.md, \"As Immich's machine-learning server\")."
    }
  }

  template {
    service_account = google_service_account.runtime.email
    timeout         = var.request_timeout

    # One GPU per instance; two requests at a time keep the GPU busy while the
    # next batch is fetched and decoded, and leave the rest to autoscaling.
    max_instance_request_concurrency = 2
    gpu_zonal_redundancy_disabled    = var.gpu_zonal_redundancy_disabled

    scaling {
      min_instance_count = 0
      max_instance_count = var.max_instances
    }

    node_selector {
      accelerator = var.gpu_type
    }

    containers {
      image = var.image

      ports {
        container_port = local.container_port
      }

      resources {
        limits = {
          cpu              = var.cpu
          memory           = var.memory
          "nvidia.com/gpu" = "1"
        }
        # GPU services need instance-based billing (CPU always allocated).
        cpu_idle          = false
        startup_cpu_boost = true
      }

      env {
        name  = "CLIPFN_MODEL"
        value = local.model_uri
      }
      env {
        name  = "CLIPFN_STORE"
        value = local.photo_uri
      }
      env {
        name  = "CLIPFN_PROVIDER"
        value = var.clipfn_provider
      }
      env {
        name  = "CLIPFN_BATCH_SIZE"
        value = tostring(var.batch_size)
      }
      env {
        name  = "CLIPFN_MAX_IMAGES"
        value = tostring(var.max_images)
      }
      env {
        name  = "CLIPFN_ALLOWED_SOURCES"
        value = var.allowed_sources
      }
      env {
        name  = "RUST_LOG"
        value = var.rust_log
      }
      dynamic "env" {
        for_each = var.extra_env
        content {
          name  = env.key
          value = env.value
        }
      }

      # Traffic arrives only once the model is loaded and warmed up on the
      # GPU: /readyz answers 503 until then. Up to 4 minutes are allowed for
      # the image pull, the model download and the CUDA warm-up.
      startup_probe {
        initial_delay_seconds = 0
        period_seconds        = 5
        timeout_seconds       = 3
        failure_threshold     = 48

        http_get {
          path = "/readyz"
          port = local.container_port
        }
      }

      liveness_probe {
        period_seconds    = 30
        timeout_seconds   = 5
        failure_threshold = 3

        http_get {
          path = "/healthz"
          port = local.container_port
        }
      }
    }
  }

  depends_on = [
    google_project_service.required,
    google_storage_bucket_iam_member.photos_reader,
    google_storage_bucket_iam_member.model_reader,
    google_storage_bucket_object.model,
  ]
}

# The backend is the only invoker. A binding (not a member) is authoritative
# for roles/run.invoker on this service: any other invoker added by hand is
# removed on the next apply.
resource "google_cloud_run_v2_service_iam_binding" "invoker" {
  project  = google_cloud_run_v2_service.clipfn.project
  location = google_cloud_run_v2_service.clipfn.location
  name     = google_cloud_run_v2_service.clipfn.name
  role     = "roles/run.invoker"
  members  = [var.backend_invoker_member]
}

# ---------------------------------------------------------------------------
# Backfill: `clipfn backfill` as a Cloud Run Job on the same image and GPU
# (docs/deploy.md, "Backfill a library"). Each task embeds its share of the
# listing and writes Parquet under local.backfill_out_uri; Cloud Run retries a
# failed task, which skips the chunks it already wrote.
# ---------------------------------------------------------------------------

locals {
  backfill_sa      = "serviceAccount:${google_service_account.backfill.email}"
  backfill_out_uri = "gs://${google_storage_bucket.photos.name}/${var.backfill_output_prefix}"
  # A manifest when one is given, else the whole photo bucket (the output
  # prefix inside it is left out of the listing).
  backfill_listing = var.backfill_manifest == "" ? ["--source", local.photo_uri] : ["--manifest", var.backfill_manifest]
  backfill_args    = concat(["backfill"], local.backfill_listing, ["--out", local.backfill_out_uri], var.backfill_incremental ? ["--incremental"] : [])
}

resource "google_service_account" "backfill" {
  account_id   = "${var.service_name}-backfill"
  display_name = "clipfn backfill job"
  description  = "Reads photos from gs://${var.photo_bucket_name} and one model object; writes only under ${var.backfill_output_prefix}/ in that bucket."

  depends_on = [google_project_service.required]
}

# Read (get and list) on the photos; list also finds the files earlier runs
# wrote, for resuming and --incremental.
resource "google_storage_bucket_iam_member" "backfill_photos_reader" {
  bucket = google_storage_bucket.photos.name
  role   = "roles/storage.objectViewer"
  member = local.backfill_sa
}

# Create objects under the output prefix and nowhere else. objectCreator can
# neither overwrite nor delete: a task only ever adds new chunk files.
resource "google_storage_bucket_iam_member" "backfill_output_writer" {
  bucket = google_storage_bucket.photos.name
  role   = "roles/storage.objectCreator"
  member = local.backfill_sa

  condition {
    title       = "clipfn-backfill-output-prefix-only"
    description = "Create objects under the backfill output prefix only."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.photos.name}/objects/${var.backfill_output_prefix}/\")"
  }
}

resource "google_storage_bucket_iam_member" "backfill_model_reader" {
  bucket = google_storage_bucket.models.name
  role   = "roles/storage.objectViewer"
  member = local.backfill_sa

  condition {
    title       = "clipfn-backfill-model-object-only"
    description = "Read the ONNX model object (or model folder) and nothing else in the bucket."
    expression  = local.model_read_condition
  }
}

resource "google_cloud_run_v2_job" "backfill" {
  name                = "${var.service_name}-backfill"
  location            = var.region
  deletion_protection = var.deletion_protection
  labels              = var.labels

  lifecycle {
    precondition {
      condition     = local.gpu_sizing_ok
      error_message = local.gpu_sizing_error
    }
  }

  template {
    task_count  = var.backfill_task_count
    parallelism = var.backfill_parallelism

    template {
      service_account = google_service_account.backfill.email
      # Cloud Run GPU tasks run for at most an hour; size task_count so that
      # one task's share fits (docs/deploy.md).
      timeout                       = "${var.backfill_task_timeout_s}s"
      max_retries                   = var.backfill_max_retries
      gpu_zonal_redundancy_disabled = var.gpu_zonal_redundancy_disabled

      node_selector {
        accelerator = var.gpu_type
      }

      containers {
        image = var.image
        args  = local.backfill_args

        resources {
          limits = {
            cpu              = var.cpu
            memory           = var.memory
            "nvidia.com/gpu" = "1"
          }
        }

        env {
          name  = "CLIPFN_MODEL"
          value = local.model_uri
        }
        env {
          name  = "CLIPFN_STORE"
          value = local.photo_uri
        }
        env {
          name  = "CLIPFN_PROVIDER"
          value = var.clipfn_provider
        }
        env {
          name  = "CLIPFN_BATCH_SIZE"
          value = tostring(var.batch_size)
        }
        env {
          name  = "CLIPFN_BACKFILL_CHUNK"
          value = tostring(var.backfill_chunk)
        }
        env {
          name  = "RUST_LOG"
          value = var.rust_log
        }
      }
    }
  }

  depends_on = [
    google_project_service.required,
    google_storage_bucket_iam_member.backfill_photos_reader,
    google_storage_bucket_iam_member.backfill_output_writer,
    google_storage_bucket_iam_member.backfill_model_reader,
    google_storage_bucket_object.model,
  ]
}
