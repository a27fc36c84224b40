//! Connection hooks: user code run on a backend's own connection when the
//! pool opens it (`post_create`) and before it is handed out again
//! (`pre_recycle`), as deadpool's hooks are.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The error a connection hook returns: anything that is an error (`?` on a
/// driver error works).
pub type HookError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The future a connection hook returns: write the hook as
/// `|conn| Box::pin(async move { ...; Ok(()) })`.
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = Result<(), HookError>> + Send + 'a>>;

type HookFn<C> = dyn for<'a> Fn(&'a mut C) -> HookFuture<'a> + Send + Sync;

/// The hooks of one pool, on connections of type `C`.
pub(crate) struct Hooks<C> {
    post_create: Vec<Arc<HookFn<C>>>,
    pre_recycle: Vec<Arc<HookFn<C>>>,
}

impl<C> Default for Hooks<C> {
    fn default() -> Self {
        Hooks {
            post_create: Vec::new(),
            pre_recycle: Vec::new(),
        }
    }
}

impl<C> Clone for Hooks<C> {
    fn clone(&self) -> Self {
        Hooks {
            post_create: self.post_create.clone(),
            pre_recycle: self.pre_recycle.clone(),
        }
    }
}

impl<C> fmt::Debug for Hooks<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("post_create", &self.post_create.len())
            .field("pre_recycle", &self.pre_recycle.len())
            .finish()
    }
}

impl<C> Hooks<C> {
    pub(crate) fn add_post_create<F>(&mut self, hook: F)
    where
        F: for<'a> Fn(&'a mut C) -> HookFuture<'a> + Send + Sync + 'static,
    {
        self.post_create.push(Arc::new(hook));
    }

    pub(crate) fn add_pre_recycle<F>(&mut self, hook: F)
    where
        F: for<'a> Fn(&'a mut C) -> HookFuture<'a> + Send + Sync + 'static,
    {
        self.pre_recycle.push(Arc::new(hook));
    }

    /// Runs the `post_create` hooks, in the order they were added.
    pub(crate) async fn post_create(&self, conn: &mut C) -> Result<(), HookFailed> {
        run(&self.post_create, "post_create", conn).await
    }

    /// Whether any `post_create` hook was added.
    #[cfg_attr(
        not(feature = "postgres"),
        allow(
            dead_code,
            reason = "the MySQL backend reads its settings after any hook"
        )
    )]
    pub(crate) fn has_post_create(&self) -> bool {
        !self.post_create.is_empty()
    }

    /// Whether any `pre_recycle` hook was added.
    pub(crate) fn has_pre_recycle(&self) -> bool {
        !self.pre_recycle.is_empty()
    }

    /// Runs the `pre_recycle` hooks, in the order they were added.
    pub(crate) async fn pre_recycle(&self, conn: &mut C) -> Result<(), HookFailed> {
        run(&self.pre_recycle, "pre_recycle", conn).await
    }
}

async fn run<C>(
    hooks: &[Arc<HookFn<C>>],
    which: &'static str,
    conn: &mut C,
) -> Result<(), HookFailed> {
    for hook in hooks {
        hook(conn)
            .await
            .map_err(|source| HookFailed { which, source })?;
    }
    Ok(())
}

/// A hook returned an error: the connection is not used.
#[derive(Debug)]
pub(crate) struct HookFailed {
    which: &'static str,
    source: HookError,
}

impl fmt::Display for HookFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} hook failed: {}", self.which, self.source)?;
        // The whole chain: a driver error's own text is often in its source
        // (tokio-postgres shows "db error" and keeps the server's message
        // there).
        let mut next = self.source.source();
        while let Some(e) = next {
            write!(f, ": {e}")?;
            next = e.source();
        }
        Ok(())
    }
}

impl std::error::Error for HookFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
