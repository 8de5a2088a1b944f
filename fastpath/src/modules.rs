//! Compiled modules, shared: lambda coalescing's runtime half (λ-NIC §5.1). Lambdas deployed
//! from the same module bytes, for the same engine, share one compiled module, so a coalesced
//! module (several lambdas in one file, one entry each: fastpath/lambdas/nf.h) is compiled and
//! kept in memory once however many lambdas use it; each lambda still gets its own instances.
//!
//! The cache holds weak references: a module lives as long as a deployed lambda (or a call still
//! running on a swapped-out one) holds it, and dead entries are dropped on the next deploy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use sha2::{Digest, Sha256};
use wasmtime::Engine;

use crate::lambda::{link_wasm, Compiled};

/// Which of the executor's engines a module is compiled for (a module belongs to one engine).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum EngineKind {
    Plain,
    Fuel,
    Sliced,
}

/// A module's cache key: its engine and the SHA-256 of its bytes.
type Key = (EngineKind, [u8; 32]);

#[derive(Default)]
pub struct Modules {
    cache: Mutex<HashMap<Key, Weak<Compiled>>>,
}

impl Modules {
    /// The compiled module for `bytes` on `engine`, and whether it was compiled now (false:
    /// another lambda's compilation was reused).
    pub fn get_or_compile(
        &self,
        kind: EngineKind,
        engine: &Engine,
        bytes: &[u8],
    ) -> Result<(Arc<Compiled>, bool), String> {
        let sha: [u8; 32] = Sha256::digest(bytes).into();
        let key = (kind, sha);
        if let Some(c) = self.cache.lock().unwrap().get(&key).and_then(Weak::upgrade) {
            return Ok((c, false));
        }
        // Compiled outside the lock: a long compilation does not hold up other deploys (two
        // racing deploys of the same bytes may both compile; the later one is kept).
        let pre = link_wasm(engine, bytes)?;
        let code_bytes = pre.module().text().len();
        let compiled = Arc::new(Compiled {
            pre,
            code_bytes,
            digest: sha[..6].iter().map(|b| format!("{b:02x}")).collect(),
        });
        let mut cache = self.cache.lock().unwrap();
        cache.retain(|_, w| w.strong_count() > 0);
        cache.insert(key, Arc::downgrade(&compiled));
        Ok((compiled, true))
    }

    /// Modules alive now and the machine code they hold, in bytes.
    pub fn live(&self) -> (usize, usize) {
        let cache = self.cache.lock().unwrap();
        let alive: Vec<Arc<Compiled>> = cache.values().filter_map(Weak::upgrade).collect();
        (alive.len(), alive.iter().map(|c| c.code_bytes).sum())
    }
}
