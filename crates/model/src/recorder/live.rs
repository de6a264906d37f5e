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
//!
//! Recording and capture through it read the context when the step begins
//! and again when it ends: a step whose context was poisoned in between is
//! refused, and a re-validation while a step is being recorded or captured
//! is refused when it is asked for, naming what it would have changed (the
//! routes already pushed were resolved under the old context).

use super::engine::CaptureStream;
use super::engine::{Captured, EagerRecording, GemmRouteRecorder, capture, record_eager};
use crate::error::{Error, Refusal, RefusalStage};
use crate::identity::GemmRouteIdentity;
use crate::plan::PreparedGemmCaptureManifest;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

/// The live context and its health. `Sync`: one per engine.
///
/// ```
/// use gemm_audit_model::recorder::LiveGemmContext;
/// use gemm_audit_model::testkit;
///
/// let live = LiveGemmContext::new(testkit::context());
/// assert!(live.ensure_gemm_usable().is_ok());
/// live.poison("cuBLAS math mode set by another library, not verified");
/// let refusal = live.ensure_gemm_usable().unwrap_err();
/// assert_eq!(refusal.change().field, "context.health");
/// live.revalidate(testkit::context()).unwrap();
/// assert!(live.ensure_gemm_usable().is_ok());
/// ```
#[derive(Debug)]
pub struct LiveGemmContext {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    identity: GemmRouteIdentity,
    poisoned: Option<String>,
    /// Times the context was poisoned, and the last reason (kept after a
    /// re-validation, for a step that was running across it).
    poisonings: u64,
    last_poison: String,
    /// Steps being recorded or captured under this context right now.
    recording: usize,
}

/// One step recorded under the context: counted while it runs, and checked
/// against the context again when it ends.
struct Step<'a> {
    live: &'a LiveGemmContext,
    began: GemmRouteIdentity,
    poisonings: u64,
}

impl<'a> Step<'a> {
    fn begin(live: &'a LiveGemmContext) -> Result<Self, Refusal> {
        let mut state = live.lock();
        let began = usable(&state)?;
        state.recording += 1;
        Ok(Step {
            live,
            began,
            poisonings: state.poisonings,
        })
    }

    /// The step's context was never poisoned while it ran (even if it was
    /// re-validated since) and is still the live one.
    fn end(self) -> Result<(), Refusal> {
        let state = self.live.lock();
        if state.poisonings != self.poisonings {
            return Err(Refusal::new(
                RefusalStage::Recording,
                None,
                "context.health",
                "a context usable for the whole step",
                format!("poisoned during the step: {}", state.last_poison),
            ));
        }
        let now = state.identity.clone();
        if now != self.began {
            return Err(crate::plan::context_refusal(
                RefusalStage::Recording,
                &self.began,
                &now,
            ));
        }
        Ok(())
    }
}

impl Drop for Step<'_> {
    fn drop(&mut self) {
        self.live.lock().recording -= 1;
    }
}

fn usable(state: &State) -> Result<GemmRouteIdentity, Refusal> {
    match &state.poisoned {
        None => Ok(state.identity.clone()),
        Some(why) => Err(Refusal::new(
            RefusalStage::ReplayValidation,
            None,
            "context.health",
            "a usable context (re-validate it after a change or a failed capture)",
            format!("poisoned: {why}"),
        )),
    }
}

impl LiveGemmContext {
    /// A usable context.
    pub fn new(identity: GemmRouteIdentity) -> Self {
        LiveGemmContext {
            state: Mutex::new(State {
                identity,
                poisoned: None,
                poisonings: 0,
                last_poison: String::new(),
                recording: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain data: a panic elsewhere cannot leave it torn.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The context's identity, whatever its health.
    pub fn identity(&self) -> GemmRouteIdentity {
        self.lock().identity.clone()
    }

    /// Why the context is poisoned, if it is.
    pub fn poisoned(&self) -> Option<String> {
        self.lock().poisoned.clone()
    }

    /// The identity to replay under, or a refusal naming why the context
    /// is not usable (`context.health`).
    pub fn ensure_gemm_usable(&self) -> Result<GemmRouteIdentity, Refusal> {
        usable(&self.lock())
    }

    /// Marks the context unusable until [`LiveGemmContext::revalidate`].
    /// The first reason is kept. A step being recorded or captured under
    /// the context when it is poisoned is refused when it ends.
    pub fn poison(&self, why: impl fmt::Display) {
        let mut state = self.lock();
        state.poisonings += 1;
        state.last_poison = why.to_string();
        if state.poisoned.is_none() {
            state.poisoned = Some(state.last_poison.clone());
        }
    }

    /// The engine looked again: this is the context now, and it is usable.
    /// Plans recorded under another identity are refused by their own
    /// validation.
    ///
    /// Refused (stage `recording`, naming the first field it would change)
    /// while a step is being recorded or captured under this context with
    /// a different identity: a policy change in the middle of a step is
    /// refused when it happens, and the step goes on under the old context.
    /// Re-validating the same identity (clearing a poison) is always
    /// accepted; a step that was running when the context was poisoned is
    /// still refused at its end.
    pub fn revalidate(&self, identity: GemmRouteIdentity) -> Result<(), Refusal> {
        let mut state = self.lock();
        if state.recording > 0 && identity != state.identity {
            return Err(crate::plan::context_refusal(
                RefusalStage::Recording,
                &state.identity,
                &identity,
            ));
        }
        state.identity = identity;
        state.poisoned = None;
        Ok(())
    }

    /// [`record_eager`] under this context: refused while it is poisoned;
    /// the context is read at the start of the step and again at its end,
    /// so a step during which the context was poisoned is refused.
    pub fn record_eager<T, E>(
        &self,
        recorder: &GemmRouteRecorder,
        body: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, EagerRecording), E>
    where
        E: From<Error>,
    {
        let step = Step::begin(self).map_err(Error::from)?;
        let recorded = record_eager(recorder, &step.began, body)?;
        step.end().map_err(Error::from)?;
        Ok(recorded)
    }

    /// [`capture`] under this context: refused while it is poisoned, and a
    /// failed capture poisons it (the stream's state is then unknown). Read
    /// again at the end like [`LiveGemmContext::record_eager`]: a capture
    /// during which the context was poisoned is refused (and its graph
    /// dropped).
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
        let step = Step::begin(self).map_err(Error::from)?;
        let captured = capture(stream, recorder, manifest, &step.began, body).inspect_err(|e| {
            self.poison(format_args!("a capture failed: {e}"));
        })?;
        step.end().map_err(Error::from)?;
        Ok(captured)
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
