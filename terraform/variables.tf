variable "project_id" {
  description = "Google Cloud project that hosts the service, the buckets and the Artifact Registry repository."
  type        = string
}

variable "region" {
  description = "The one region for the Cloud Run GPU service, the photo bucket, the model bucket and the image repository. Must offer Cloud Run L4 GPUs."
  type        = string
  default     = "us-central1"

  validation {
    condition     = contains(["us-central1", "us-east4", "europe-west1", "europe-west4", "asia-southeast1"], var.region)
    error_message = "The region must be one with Cloud Run nvidia-l4 GPUs: us-central1, us-east4, europe-west1, europe-west4 or asia-southeast1."
  }
}

variable "service_name" {
  description = "Name of the Cloud Run service; also the prefix of its runtime service account."
  type        = string
  default     = "clipfn"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,25}$", var.service_name))
    error_message = "The service name must be 2-26 characters of lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "image" {
  description = "Container image built from Dockerfile.cuda for var.gpu_type (CUDA=12 for nvidia-l4, CUDA=13 for nvidia-rtx-pro-6000), e.g. us-central1-docker.pkg.dev/PROJECT/clipfn/clipfn:TAG (see the artifact_registry_url output)."
  type        = string

  validation {
    condition     = length(trimspace(var.image)) > 0
    error_message = "Set image to the pushed Dockerfile.cuda image."
  }
}

variable "artifact_repository_id" {
  description = "Artifact Registry Docker repository created for the images."
  type        = string
  default     = "clipfn"
}

variable "photo_bucket_name" {
  description = "Globally unique name of the photo bucket created in var.region; bare keys in requests resolve against it (CLIPFN_STORE)."
  type        = string
}

variable "model_bucket_name" {
  description = "Globally unique name of the bucket created in var.region for the ONNX model. The service may read only the model object in it."
  type        = string
}

variable "model_object" {
  description = "Object name of the ONNX CLIP ViT-B/32 image encoder inside the model bucket, or a model folder ending in \"/\" (onnx/vision_model*.onnx, preprocessor_config.json...: clipfn picks the precision for the provider, docs/deploy.md)."
  type        = string
  default     = "clip-vit-b32/model.onnx"

  validation {
    condition     = length(var.model_object) > 0 && !startswith(var.model_object, "/")
    error_message = "model_object is an object name or a folder ending in /, without a leading slash, e.g. clip-vit-b32/model.onnx or clip-vit-b32/."
  }
}

variable "model_source_path" {
  description = "Optional local path of the ONNX model; when set, Terraform uploads it as model_object. Leave empty to upload it yourself (gcloud storage cp)."
  type        = string
  default     = ""
}

variable "backend_invoker_member" {
  description = "IAM member of the backend that calls the service, e.g. serviceAccount:backend@PROJECT.iam.gserviceaccount.com. It is the only principal granted roles/run.invoker."
  type        = string

  validation {
    condition     = can(regex("^(serviceAccount|user|group|principal|principalSet):.+", var.backend_invoker_member))
    error_message = "backend_invoker_member must be one identity such as serviceAccount:NAME@PROJECT.iam.gserviceaccount.com; allUsers and allAuthenticatedUsers are not allowed."
  }
}

variable "max_instances" {
  description = "Upper bound of GPU instances; each one holds an L4 and needs GPU quota in the region."
  type        = number
  default     = 3

  validation {
    condition     = var.max_instances >= 1 && var.max_instances <= 100 && floor(var.max_instances) == var.max_instances
    error_message = "max_instances must be a whole number between 1 and 100."
  }
}

variable "gpu_zonal_redundancy_disabled" {
  description = "true: best-effort failover between zones at the lower GPU price (needs the non-zonal-redundancy GPU quota); false: reserved zonal redundancy."
  type        = bool
  default     = true
}

variable "gpu_type" {
  description = "The GPU on every instance and backfill task: nvidia-l4 (driver 535, CUDA 12: the Dockerfile.cuda image built with CUDA=12) or nvidia-rtx-pro-6000 (RTX PRO 6000 Blackwell, driver 580, CUDA 13: built with CUDA=13). Each has its own CPU and memory minimum (local.gpu_minimums), checked before anything is created."
  type        = string
  default     = "nvidia-l4"

  validation {
    condition     = contains(["nvidia-l4", "nvidia-rtx-pro-6000"], var.gpu_type)
    error_message = "gpu_type must be nvidia-l4 or nvidia-rtx-pro-6000 (the two GPUs Cloud Run offers)."
  }
}

variable "cpu" {
  description = "vCPU limit per instance, a whole number. Cloud Run needs at least 4 with an L4 and 20 with an RTX PRO 6000; decoding and resizing photos is CPU work, so more helps large requests."
  type        = string
  default     = "4"

  validation {
    condition     = can(regex("^([4-9]|[1-9][0-9])$", var.cpu))
    error_message = "cpu must be a whole number of at least 4, written like \"4\" or \"20\" (Cloud Run GPU instances need at least 4; with an RTX PRO 6000, 20)."
  }
}

variable "memory" {
  description = "Memory limit per instance, in Gi. Cloud Run needs at least 16Gi with an L4 and 80Gi with an RTX PRO 6000."
  type        = string
  default     = "16Gi"

  validation {
    condition     = can(regex("^(1[6-9]|[2-9][0-9]|[1-9][0-9][0-9])Gi$", var.memory))
    error_message = "memory must be between 16Gi and 999Gi, written like 16Gi or 80Gi (Cloud Run GPU instances need at least 16Gi; with an RTX PRO 6000, 80Gi)."
  }
}

variable "request_timeout" {
  description = "Longest time Cloud Run lets one request run."
  type        = string
  default     = "300s"
}

variable "clipfn_provider" {
  description = "CLIPFN_PROVIDER: cuda fails start-up when the GPU cannot be used instead of silently running on CPU."
  type        = string
  default     = "cuda"

  validation {
    condition     = contains(["auto", "cuda", "cpu"], var.clipfn_provider)
    error_message = "clipfn_provider must be auto, cuda or cpu."
  }
}

variable "batch_size" {
  description = "CLIPFN_BATCH_SIZE: images per ONNX Runtime run."
  type        = number
  default     = 64
}

variable "max_images" {
  description = "CLIPFN_MAX_IMAGES: most images accepted in one request."
  type        = number
  default     = 100
}

variable "allowed_sources" {
  description = "CLIPFN_ALLOWED_SOURCES: comma-separated extra URI prefixes requests may name besides bare keys in the photo bucket. The service account can only read the photo bucket unless you grant more."
  type        = string
  default     = ""
}

variable "rust_log" {
  description = "RUST_LOG filter for the service's logs."
  type        = string
  default     = "info"
}

variable "extra_env" {
  description = "Further environment variables for the container, e.g. { CLIPFN_MAX_IMAGE_BYTES = \"20000000\" }."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for name in keys(var.extra_env) : !contains(["PORT", "CLIPFN_MODEL", "CLIPFN_STORE", "CLIPFN_PROVIDER", "CLIPFN_BATCH_SIZE", "CLIPFN_MAX_IMAGES", "CLIPFN_ALLOWED_SOURCES", "RUST_LOG"], name)])
    error_message = "extra_env must not set variables that this module manages (PORT, CLIPFN_MODEL, CLIPFN_STORE, CLIPFN_PROVIDER, CLIPFN_BATCH_SIZE, CLIPFN_MAX_IMAGES, CLIPFN_ALLOWED_SOURCES, RUST_LOG)."
  }

  validation {
    condition     = !contains(keys(var.extra_env), "CLIPFN_ALLOW_PRIVATE_SOURCES")
    error_message = "extra_env must not set CLIPFN_ALLOW_PRIVATE_SOURCES: it lets photo URLs reach loopback and private addresses, for tests and local stacks only."
  }
}

variable "ingress" {
  description = "Who may reach the URL at the network level; IAM (roles/run.invoker) still authenticates every request unless immich_network_access is true, which needs INGRESS_TRAFFIC_INTERNAL_ONLY."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.ingress)
    error_message = "ingress must be INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "immich_network_access" {
  description = "Let an Immich server call the service without credentials (Immich's machine-learning client sends none), over the VPC only. false (the default): Cloud Run's invoker IAM check stays on and only backend_invoker_member may call; Immich then goes through an ID-token proxy beside it (docs/deploy.md). true: the invoker IAM check is off (invoker_iam_disabled) and a precondition refuses the plan unless ingress = \"INGRESS_TRAFFIC_INTERNAL_ONLY\", so only the project's own VPC networks (and what a VPC Service Controls perimeter holding the service admits) reach it: Immich on a Compute Engine VM or GKE in such a VPC (Private Google Access on the subnet for a VM without an external IP), or on Cloud Run through Direct VPC egress or a Serverless VPC Access connector with all traffic routed through the VPC. Anything on those networks may then call it. Changing it needs run.services.setIamPolicy (roles/run.admin)."
  type        = bool
  default     = false
}

variable "deletion_protection" {
  description = "Protect the Cloud Run service from terraform destroy; set false before destroying."
  type        = bool
  default     = true
}

variable "labels" {
  description = "Labels put on the service, the buckets and the repository."
  type        = map(string)
  default     = {}
}

variable "backfill_manifest" {
  description = "Backfill job: URI of a manifest (one photo key per line). Empty: the job lists the whole photo bucket."
  type        = string
  default     = ""
}

variable "backfill_output_prefix" {
  description = "Backfill job: folder in the photo bucket that the Parquet files go under; the job may create objects there and nowhere else."
  type        = string
  default     = "embeddings"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.backfill_output_prefix))
    error_message = "backfill_output_prefix is a folder name such as embeddings or embeddings/clip-vit-b32, without leading or trailing slashes."
  }
}

variable "backfill_incremental" {
  description = "Backfill job: embed only photos that have no row under the output prefix yet (--incremental), so a scheduled run picks up new photos."
  type        = bool
  default     = true
}

variable "backfill_task_count" {
  description = "Backfill job: tasks the listing is sharded over. Size it as photos / (3600 s x photos/s per task) or more (docs/deploy.md)."
  type        = number
  default     = 10

  validation {
    condition     = var.backfill_task_count >= 1 && var.backfill_task_count <= 10000 && floor(var.backfill_task_count) == var.backfill_task_count
    error_message = "backfill_task_count must be a whole number between 1 and 10000."
  }
}

variable "backfill_parallelism" {
  description = "Backfill job: tasks running at once, each on its own L4; bounded by the region's GPU quota."
  type        = number
  default     = 3

  validation {
    condition     = var.backfill_parallelism >= 1 && floor(var.backfill_parallelism) == var.backfill_parallelism
    error_message = "backfill_parallelism must be a whole number of at least 1."
  }
}

variable "backfill_max_retries" {
  description = "Backfill job: retries of a failed task; a retry skips the chunks already written."
  type        = number
  default     = 3

  validation {
    condition     = var.backfill_max_retries >= 0 && var.backfill_max_retries <= 10 && floor(var.backfill_max_retries) == var.backfill_max_retries
    error_message = "backfill_max_retries must be a whole number between 0 and 10."
  }
}

variable "backfill_task_timeout_s" {
  description = "Backfill job: seconds one task may run. Cloud Run GPU tasks allow at most 3600."
  type        = number
  default     = 3600

  validation {
    condition     = var.backfill_task_timeout_s >= 60 && var.backfill_task_timeout_s <= 3600
    error_message = "backfill_task_timeout_s must be between 60 and 3600 (the Cloud Run limit for GPU tasks)."
  }
}

variable "backfill_chunk" {
  description = "Backfill job: CLIPFN_BACKFILL_CHUNK (clipfn backfill --chunk), photos per Parquet file and the most a retry redoes."
  type        = number
  default     = 5000

  validation {
    condition     = var.backfill_chunk >= 1 && floor(var.backfill_chunk) == var.backfill_chunk
    error_message = "backfill_chunk must be a whole number of at least 1 (clipfn backfill --chunk refuses 0)."
  }
}
