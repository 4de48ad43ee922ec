//! `clipfn serve`: the HTTP server's life cycle. It listens at once (so /healthz answers while the
//! model loads), becomes ready after warm-up, and on SIGTERM drains: /readyz turns 503, accepted
//! requests finish within the grace period, then the process exits 0.

use std::{net::Ipv4Addr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::{net::TcpListener, sync::oneshot};

use crate::{api, config::Settings, pipeline::Pipeline, telemetry::Telemetry};

pub async fn run(settings: Settings, port: u16, telemetry: &Telemetry) -> anyhow::Result<()> {
    let settings = Arc::new(settings);
    let metrics = telemetry.metrics();
    let state = api::AppState::new(Arc::clone(&settings), Arc::clone(&metrics), telemetry.scrape());
    let listener =
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await.with_context(|| format!("binding port {port}"))?;
    tracing::info!(port, "listening");

    let load = async {
        let pipeline = Pipeline::load(&settings, metrics).await?;
        state.set_ready(Arc::new(pipeline));
        tracing::info!("ready");
        anyhow::Ok(())
    };
    let serve = async {
        let (drain_started, draining) = oneshot::channel();
        let server = axum::serve(listener, api::router(state.clone()))
            .with_graceful_shutdown(shutdown_signal(state.clone(), drain_started));
        let grace = Duration::from_secs(settings.shutdown_grace_s);
        tokio::select! {
            result = server => result.context("serving HTTP"),
            _ = async { let _ = draining.await; tokio::time::sleep(grace).await } => {
                tracing::warn!(grace_s = grace.as_secs(), "grace period over; abandoning unfinished requests");
                Ok(())
            }
        }
    };
    // A model that cannot load ends the process with its error: such a container can never be
    // ready. A shutdown while the model still loads ends the process too, without waiting for it.
    tokio::select! {
        result = serve => result?,
        Err(e) = load => return Err(e),
    }
    tracing::info!("drained; exiting");
    Ok(())
}

async fn shutdown_signal(state: api::AppState, drain_started: oneshot::Sender<()>) {
    let ctrl_c = async { tokio::signal::ctrl_c().await.expect("installing the Ctrl-C handler") };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
    tracing::info!("shutdown signal: draining");
    state.start_draining();
    let _ = drain_started.send(());
}
