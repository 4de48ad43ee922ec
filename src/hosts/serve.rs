//! `clipfn serve`: the HTTP server's life cycle. It listens at once (so /healthz answers while the
//! model loads), becomes ready after warm-up, and on SIGTERM drains: /readyz turns 503 and accepted
//! requests finish. One deadline, SIGTERM + `CLIPFN_SHUTDOWN_GRACE_S` (8 s, inside Cloud Run's 10 s
//! before SIGKILL), covers the drain, the answers to requests still in flight then
//! (`shutting_down`), the telemetry flush and the exit 0.

use std::{
    future::IntoFuture,
    net::Ipv4Addr,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use tokio::{net::TcpListener, sync::oneshot};

use crate::{api, observe::telemetry::Telemetry, service::Service, settings::Settings};

/// How much of the shutdown window is kept for what follows the drain: requests still in flight
/// answering `shutting_down`, then the telemetry flush.
const AFTER_DRAIN: Duration = Duration::from_millis(1500);

/// Serves until a shutdown signal, then drains; returns the instant by which the process must have
/// exited (SIGTERM + `CLIPFN_SHUTDOWN_GRACE_S`), which the telemetry flush must also respect.
pub async fn run(settings: Settings, port: u16, telemetry: &Telemetry) -> anyhow::Result<Instant> {
    let settings = Arc::new(settings);
    let metrics = telemetry.metrics();
    let state = api::AppState::new(Arc::clone(&settings), Arc::clone(&metrics), telemetry.scrape());
    let listener =
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await.with_context(|| format!("binding port {port}"))?;
    tracing::info!(port, "listening");

    let load = async {
        let service = Service::load(&settings, metrics).await?;
        state.set_ready(Arc::new(service));
        tracing::info!("ready");
        anyhow::Ok(())
    };
    let window = Duration::from_secs(settings.server.shutdown_grace_s);
    let serve = async {
        let (signalled, mut signal) = oneshot::channel();
        let server = axum::serve(listener, api::router(state.clone()))
            .with_graceful_shutdown(shutdown_signal(state.clone(), signalled))
            .into_future();
        tokio::pin!(server);
        let (signalled_at, drained) = tokio::select! {
            Ok(at) = &mut signal => (at, false),
            // With no connection open, the server ends in the same poll that saw the signal.
            result = &mut server => {
                result.context("serving HTTP")?;
                (signal.try_recv().context("the HTTP server stopped without a shutdown signal")?, true)
            }
        };
        let exit_by = signalled_at + window;
        // Accepted requests finish, until the time after the drain is all that is left.
        let after_drain = AFTER_DRAIN.min(window / 4);
        let give_up_at = exit_by - after_drain;
        if !drained && tokio::time::timeout_at(give_up_at.into(), &mut server).await.is_err() {
            tracing::warn!("drain time over; requests still in flight answer shutting_down");
            state.give_up_in_flight();
            let answered_by = give_up_at + after_drain / 3;
            if tokio::time::timeout_at(answered_by.into(), &mut server).await.is_err() {
                tracing::warn!("connections still open; closing them");
            }
        }
        anyhow::Ok(exit_by)
    };
    // A model that cannot load ends the process with its error: such a container can never be
    // ready. A shutdown while the model still loads ends the process too, without waiting for it.
    let exit_by = tokio::select! {
        result = serve => result?,
        Err(e) = load => return Err(e),
    };
    tracing::info!("drained; exiting");
    Ok(exit_by)
}

/// Waits for SIGTERM or Ctrl-C, turns the service to draining and says when it came.
async fn shutdown_signal(state: api::AppState, signalled: oneshot::Sender<Instant>) {
    let ctrl_c = async { tokio::signal::ctrl_c().await.expect("installing the Ctrl-C handler") };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
    tracing::info!("shutdown signal: draining");
    state.start_draining();
    let _ = signalled.send(Instant::now());
}
