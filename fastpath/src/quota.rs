//! Instance slots per group: no group (namespace) may hold more than half of a pool's slots.
//!
//! Every wasm instance the executor makes for a call (a lambda's, cached or travelling with a
//! suspended call) or for a stream request takes a slot of a fixed pool (`lambda::Pool`, sized by
//! `fastpath.memory`). Idle cached instances are evicted when a call needs a slot, but an
//! instance held by a *suspended* call (a sliced call that yielded, `slice.rs`) or by an open
//! stream request cannot be: red team round 6 (R3) deployed 530 spinning lambdas and sent one
//! datagram to each, and the suspended spinners held every slot, so every other tenant's lambda
//! that needed an instance answered OVERLOADED for as long as the sender kept going. So each
//! instance carries a [`Ticket`] of its group (the deploy's `group`; the gateway sends the
//! namespace, a bare executor uses the function's name), and a group holds at most [`share`]
//! tickets at once: past it, the call that needs one more is answered OVERLOADED (after its own
//! group's idle instance, if this worker caches one, is dropped to make room), and the slots left
//! are the other groups'.
//!
//! Worked example, the default 1 GiB budget (21 slots per engine): tenant-b's 530 spinners get
//! 10 instances and the rest of its calls answer OVERLOADED; tenant-a's lambdas find the other 11
//! slots (less the pool's reserve) and answer OK.
//!
//! Known caveats:
//! * The share is of one engine's pool, counted over all engines: a group never holds more
//!   than that many instances in all, whichever engines they are from (conservative).
//! * A tenant with several namespaces has several shares (namespaces are the operator's to give).
//! * An instance made for a deploy's ABI check takes no ticket: deploys are the admin's, and the
//!   pool keeps a reserve of slots for them (`lambda::RESERVED_SLOTS`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::lambda;

fn held() -> &'static Mutex<HashMap<Arc<str>, usize>> {
    static HELD: OnceLock<Mutex<HashMap<Arc<str>, usize>>> = OnceLock::new();
    HELD.get_or_init(Default::default)
}

/// Instances one group may hold at once: half of a pool's slots (at least one).
pub fn share() -> usize {
    (lambda::pool().slots as usize / 2).max(1)
}

/// Instances `group` holds now.
pub fn holding(group: &str) -> usize {
    held().lock().unwrap().get(group).copied().unwrap_or(0)
}

/// One instance's claim on its group's share; given back when dropped (with the instance).
#[derive(Debug)]
pub struct Ticket {
    group: Arc<str>,
}

/// A ticket for one more instance of `group`, or why not: the message starts with
/// `instantiate:`, which the call paths answer OVERLOADED.
pub fn acquire(group: &Arc<str>) -> Result<Ticket, String> {
    let mut m = held().lock().unwrap();
    let n = m.entry(group.clone()).or_insert(0);
    let share = share();
    if *n >= share {
        return Err(format!(
            "instantiate: group {group:?} holds {n} instances, its share (half of the pool's {} slots; fastpath.memory sizes the pool)",
            lambda::pool().slots
        ));
    }
    *n += 1;
    Ok(Ticket {
        group: group.clone(),
    })
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut m = held().lock().unwrap();
        if let Some(n) = m.get_mut(&self.group) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.group);
            }
        }
    }
}
