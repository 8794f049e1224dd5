//! A file's bytes mapped read-only instead of copied: `kiln-store snapshot restore` and `status` read
//! snapshots of up to gigabytes once, front to back; a copy into fresh memory costs more than the hashing.

use std::fs::File;
use std::ops::Deref;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The bytes of a file, mapped private and read-only (pages populated up front, as they are all read).
/// The file must not be cut while it is mapped (reading past a cut end faults, as with any mapping); a
/// snapshot being restored is nobody's to change, and its sha256 is checked over these very bytes.
pub struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; nothing else aliases it mutably.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

impl Mapped {
    pub fn open(path: &Path) -> std::io::Result<Mapped> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::other("file too large to map"))?;
        if len == 0 {
            // mmap refuses an empty range; an empty slice needs no mapping.
            return Ok(Mapped {
                ptr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a fresh private read-only mapping of an open file; checked for failure below, unmapped
        // in Drop with the same length.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped { ptr, len })
    }
}

impl Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `open`, unmapped once.
            unsafe {
                libc::munmap(self.ptr, self.len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_what_the_file_holds_and_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(&*Mapped::open(&p).unwrap(), bytes.as_slice());
        std::fs::write(&p, b"").unwrap();
        assert!(Mapped::open(&p).unwrap().is_empty());
        assert!(Mapped::open(&dir.path().join("missing")).is_err());
    }
}
