//! Errors returned to controllers: an errno-style code (as BESS's `error.code`) and a message.

/// A control-plane error with BESS's errno convention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// errno value (EINVAL, ENOENT, ...), as in BESS's `Error.code`.
    pub code: i32,
    /// Human-readable message naming what was wrong.
    pub msg: String,
}

/// Result alias for control-plane operations.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with an explicit errno.
    pub fn new(code: i32, msg: impl Into<String>) -> Error {
        Error {
            code,
            msg: msg.into(),
        }
    }
    /// EINVAL: a bad argument.
    pub fn invalid(msg: impl Into<String>) -> Error {
        Error::new(libc::EINVAL, msg)
    }
    /// ENOENT: something named does not exist.
    pub fn not_found(msg: impl Into<String>) -> Error {
        Error::new(libc::ENOENT, msg)
    }
    /// EEXIST: a name is taken.
    pub fn exists(msg: impl Into<String>) -> Error {
        Error::new(libc::EEXIST, msg)
    }
    /// EBUSY: the object is in use.
    pub fn busy(msg: impl Into<String>) -> Error {
        Error::new(libc::EBUSY, msg)
    }
    /// ENOMEM: out of some resource.
    pub fn no_mem(msg: impl Into<String>) -> Error {
        Error::new(libc::ENOMEM, msg)
    }
    /// ENOTSUP: not supported.
    pub fn unsupported(msg: impl Into<String>) -> Error {
        Error::new(libc::ENOTSUP, msg)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

/// The last OS error as an [`Error`] with its errno, prefixed with `what`; EPERM/EACCES say
/// that the daemon needs root (or CAP_NET_ADMIN / CAP_NET_RAW).
pub fn os_error(what: &str) -> Error {
    io_error(what, std::io::Error::last_os_error())
}

/// OS error `e` as an [`Error`], worded as [`os_error`] does.
pub fn io_error(what: &str, e: std::io::Error) -> Error {
    let code = e.raw_os_error().unwrap_or(libc::EIO);
    let hint = if code == libc::EPERM || code == libc::EACCES {
        " (the daemon needs root, or CAP_NET_ADMIN and CAP_NET_RAW)"
    } else {
        ""
    };
    Error::new(code, format!("{what}: {e}{hint}"))
}
