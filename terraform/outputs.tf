output "service_url" {
  description = "HTTPS URL of the service; call it with an identity token of the backend (audience = this URL)."
  value       = google_cloud_run_v2_service.clipfn.uri
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
  description = "The only member allowed to invoke the service."
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
