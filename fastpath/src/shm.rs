//! A client's memfd, mapped shared (large payloads over the Unix datagram socket).

use std::os::fd::{AsRawFd, OwnedFd};

pub struct Shm {
    ptr: *mut u8,
    map_len: usize,
    /// Length of the request payload at offset 0.
    pub in_len: usize,
}

// The mapping is owned by exactly one job at a time.
unsafe impl Send for Shm {}

/// Why a client's memfd cannot be used.
#[derive(Debug)]
pub enum MapError {
    /// Not sealed with F_SEAL_SHRINK (answered BAD_REQUEST).
    Unsealed,
    /// Too short for the stated input, or not mappable (answered TOO_LARGE).
    #[allow(dead_code)] // the message is for debugging
    Other(String),
}

impl Shm {
    /// Map the whole memfd read-write, shared. Fails if it is shorter than `in_len` or larger
    /// than `max_size`.
    pub fn map(fd: &OwnedFd, in_len: usize, max_size: usize) -> Result<Shm, MapError> {
        // A client that shrank the memfd under our mapping would make the next touch of those
        // pages a SIGBUS that kills the executor: only a memfd sealed against shrinking is used.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(MapError::Unsealed);
        }
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(MapError::Other(format!(
                "fstat: {}",
                std::io::Error::last_os_error()
            )));
        }
        let size = st.st_size as usize;
        if size < in_len {
            return Err(MapError::Other(format!(
                "memfd holds {size} bytes but the message says {in_len}"
            )));
        }
        if size > max_size {
            return Err(MapError::Other(format!(
                "memfd holds {size} bytes; the executor maps at most {max_size}"
            )));
        }
        if size == 0 {
            return Ok(Shm {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                map_len: 0,
                in_len: 0,
            });
        }
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MapError::Other(format!(
                "mmap: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Shm {
            ptr: p as *mut u8,
            map_len: size,
            in_len,
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.map_len) }
    }

    /// The mapping, writable. The pointee is the client's shared memory, not memory owned by
    /// this struct; exactly one job holds a `Shm` at a time, and callers keep one such slice
    /// alive at a time.
    #[allow(clippy::mut_from_ref)]
    pub fn mapping_mut(&self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.map_len) }
    }

    pub fn input(&self) -> &[u8] {
        &self.as_slice()[..self.in_len]
    }

    /// Bytes mapped (the memfd's size, which the reply may fill).
    pub fn len(&self) -> usize {
        self.map_len
    }

    pub fn is_empty(&self) -> bool {
        self.map_len == 0
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        if self.map_len > 0 {
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.map_len) };
        }
    }
}
