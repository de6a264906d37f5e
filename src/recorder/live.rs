//! The live context an engine replays under, with its health: usable, or
//! poisoned until it is re-validated.
//!
//! A [`GemmRouteIdentity`] says what the context is. Whether the engine can
//! still trust that is a separate fact: after a capture failed (a stream
//! left in an unknown state), or after something changed that the engine
//! did not verify (a cuBLAS handle's math mode set by other code), no
//! replay may run until the engine has looked again and said what the
//! context now is. [`LiveGemmContext::ensure_gemm_usable`] refuses while
//! the context is poisoned; [`LiveGemmContext::revalidate`] clears it.

use super::engine::{Captured, GemmRouteRecorder, capture};
use crate::backend::CaptureStream;
use crate::error::{Error, Refusal, RefusalStage};
use crate::identity::GemmRouteIdentity;
use crate::plan::PreparedGemmCaptureManifest;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

/// The live context and its health. `Sync`: one per engine.
///
/// ```
/// use gemm_audit::recorder::LiveGemmContext;
/// use gemm_audit::testkit;
///
/// let live = LiveGemmContext::new(testkit::context());
/// assert!(live.ensure_gemm_usable().is_ok());
/// live.poison("cuBLAS math mode set by another library, not verified");
/// let refusal = live.ensure_gemm_usable().unwrap_err();
/// assert_eq!(refusal.change().field, "context.health");
/// live.revalidate(testkit::context());
/// assert!(live.ensure_gemm_usable().is_ok());
/// ```
#[derive(Debug)]
pub struct LiveGemmContext {
    state: Mutex<(GemmRouteIdentity, Option<String>)>,
}

impl LiveGemmContext {
    /// A usable context.
    pub fn new(identity: GemmRouteIdentity) -> Self {
        LiveGemmContext {
            state: Mutex::new((identity, None)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, (GemmRouteIdentity, Option<String>)> {
        // The state is plain data: a panic elsewhere cannot leave it torn.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The context's identity, whatever its health.
    pub fn identity(&self) -> GemmRouteIdentity {
        self.lock().0.clone()
    }

    /// Why the context is poisoned, if it is.
    pub fn poisoned(&self) -> Option<String> {
        self.lock().1.clone()
    }

    /// The identity to replay under, or a refusal naming why the context
    /// is not usable (`context.health`).
    pub fn ensure_gemm_usable(&self) -> Result<GemmRouteIdentity, Refusal> {
        let state = self.lock();
        match &state.1 {
            None => Ok(state.0.clone()),
            Some(why) => Err(Refusal::new(
                RefusalStage::ReplayValidation,
                None,
                "context.health",
                "a usable context (re-validate it after a change or a failed capture)",
                format!("poisoned: {why}"),
            )),
        }
    }

    /// Marks the context unusable until [`LiveGemmContext::revalidate`].
    /// The first reason is kept.
    pub fn poison(&self, why: impl fmt::Display) {
        self.lock().1.get_or_insert_with(|| why.to_string());
    }

    /// The engine looked again: this is the context now, and it is usable.
    /// Plans recorded under another identity are refused by their own
    /// validation.
    pub fn revalidate(&self, identity: GemmRouteIdentity) {
        *self.lock() = (identity, None);
    }

    /// [`capture`] under this context: refused while it is poisoned, and a
    /// failed capture poisons it (the stream's state is then unknown).
    pub fn capture<S, T, E>(
        &self,
        stream: &S,
        recorder: &GemmRouteRecorder,
        manifest: Option<&PreparedGemmCaptureManifest>,
        body: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, Captured<S::Graph>), E>
    where
        S: CaptureStream,
        E: From<Error> + fmt::Display,
    {
        let live = self.ensure_gemm_usable().map_err(Error::from)?;
        capture(stream, recorder, manifest, &live, body).inspect_err(|e| {
            self.poison(format_args!("a capture failed: {e}"));
        })
    }

    /// [`Captured::launch_validated`] under this context: refused while it
    /// is poisoned, then validated against its identity.
    pub fn launch_validated<G, R>(
        &self,
        captured: &Captured<G>,
        label: &str,
        launch: impl FnOnce(&G) -> R,
    ) -> Result<R, Refusal> {
        let live = self.ensure_gemm_usable()?;
        captured.launch_validated(&live, label, launch)
    }
}
