output "service_url" {
  description = "HTTPS URL of the service; call it with an identity token of the backend (audience = this URL). An ID-token proxy beside Immich forwards to this URL with this audience."
  value       = google_cloud_run_v2_service.clipfn.uri
}

output "immich_machine_learning_url" {
  description = "IMMICH_MACHINE_LEARNING_URL for an Immich server inside the VPC, set only with immich_network_access = true (internal ingress, no token). null while the invoker IAM check is on: Immich then points at its ID-token proxy, whose upstream is service_url (docs/deploy.md)."
  value       = var.immich_network_access ? google_cloud_run_v2_service.clipfn.uri : null
}

output "artifact_registry_url" {
  description = "Docker repository to push Dockerfile.cuda images to: docker push <this>/clipfn:TAG."
  value       = "${google_artifact_registry_repository.images.location}-docker.pkg.dev/${google_artifact_registry_repository.images.project}/${google_artifact_registry_repository.images.repository_id}"
}

output "runtime_service_account" {
  description = "Identity the service runs as (read-only on the photo bucket and the model object)."
  value       = google_service_account.runtime.email
}

output "photo_bucket" {
  description = "Bucket that bare photo keys resolve against (CLIPFN_STORE)."
  value       = google_storage_bucket.photos.name
}

output "model_uri" {
  description = "Where the service loads the ONNX model from (CLIPFN_MODEL); upload the model here."
  value       = local.model_uri
}

output "invoker" {
  description = "The only member granted roles/run.invoker on the service (not checked while immich_network_access turns the invoker IAM check off)."
  value       = var.backend_invoker_member
}

output "backfill_job" {
  description = "Cloud Run Job that runs clipfn backfill: gcloud run jobs execute <this> --region <region>."
  value       = google_cloud_run_v2_job.backfill.name
}

output "backfill_output_uri" {
  description = "Where the backfill job writes its Parquet files."
  value       = local.backfill_out_uri
}
