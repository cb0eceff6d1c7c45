//! The background thread of a store that reads through a storage function: it takes a new
//! checkpoint or snapshot at every interval until the store is dropped.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the thread waits on between ticks: the store's drop wakes it at once.
#[derive(Debug, Default)]
pub(crate) struct Ticker {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Ticker {
    /// Waits `every`, or less if the store is dropped meanwhile; `false` once it is.
    pub(crate) fn wait(&self, every: Duration) -> bool {
        let g = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        let (g, _) = self
            .wake
            .wait_timeout_while(g, every, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        !*g
    }
}

/// A thread running `body` with its [`Ticker`]; stopped and joined on drop.
#[derive(Debug)]
pub(crate) struct Periodic {
    ticker: Arc<Ticker>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    pub(crate) fn spawn(body: impl FnOnce(&Ticker) + Send + 'static) -> Self {
        let ticker = Arc::new(Ticker::default());
        let t = Arc::clone(&ticker);
        let thread = std::thread::spawn(move || body(&t));
        Self { ticker, thread: Some(thread) }
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        *self.ticker.stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.ticker.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // A panic on the thread has already been reported on it; the store goes anyway.
            let _ = t.join();
        }
    }
}
