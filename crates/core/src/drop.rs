//! Why modules drop packets: the [`DropReason`] trait, the [`drop_reasons!`](crate::drop_reasons)
//! macro that declares a class's reasons, and the [`CoreDrop`] reasons every class has.

/// A named reason a module drops packets: a variant of a class's drop-reason enum (declared
/// with [`drop_reasons!`](crate::drop_reasons)), or one of the [`CoreDrop`] reasons every
/// class has.
pub trait DropReason: Copy {
    /// Position of the reason in its class's `drop_reasons` (the counter index); the core
    /// reasons use ids past any class's.
    fn index(self) -> usize;
    /// The printed name.
    fn name(self) -> &'static str;
}

/// Declares a class's drop reasons as an enum whose variants give the counter index and the
/// printed name, with `NAMES` (for
/// [`ModuleClass::drop_reasons`](crate::module::ModuleClass::drop_reasons)) and a
/// [`DropReason`] impl:
///
/// ```ignore
/// drop_reasons! {
///     /// Why UpdateTTL drops.
///     pub enum UpdateTtlDrop { TooShort = "too_short", TtlExpired = "ttl_expired" }
/// }
/// ```
///
/// A first variant of the form `Name(OtherReasons)` embeds another reason enum (e.g. the IPv4
/// header errors several rewriters share): its reasons come first, under their own names, and
/// `From<OtherReasons>` is implemented.
#[macro_export]
macro_rules! drop_reasons {
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident {
            $bvar:ident($base:ty),
            $( $(#[$vm:meta])* $var:ident = $str:literal ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            #[allow(missing_docs)]
            $bvar($base),
            $( $(#[$vm])* $var ),*
        }

        impl $name {
            #[doc(hidden)]
            const OWN: &'static [&'static str] = &[$($str),*];
            /// The printed names, in counter order.
            pub const NAMES: &'static [&'static str] = &{
                let base = <$base>::NAMES;
                let own = Self::OWN;
                let mut out = [""; <$base>::NAMES.len() + Self::OWN.len()];
                let mut i = 0;
                while i < base.len() {
                    out[i] = base[i];
                    i += 1;
                }
                let mut j = 0;
                while j < own.len() {
                    out[i + j] = own[j];
                    j += 1;
                }
                out
            };
        }

        impl From<$base> for $name {
            #[inline(always)]
            fn from(r: $base) -> $name {
                $name::$bvar(r)
            }
        }

        impl $crate::module::DropReason for $name {
            #[inline(always)]
            fn index(self) -> usize {
                #[allow(dead_code)]
                enum __OwnReasons { $($var),* }
                match self {
                    $name::$bvar(r) => $crate::module::DropReason::index(r),
                    $( $name::$var => <$base>::NAMES.len() + __OwnReasons::$var as usize, )*
                }
            }
            fn name(self) -> &'static str {
                Self::NAMES[$crate::module::DropReason::index(self)]
            }
        }
    };
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vm:meta])* $var:ident = $str:literal ),+ $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vm])* $var ),+
        }

        impl $name {
            /// The printed names, in counter order.
            pub const NAMES: &'static [&'static str] = &[$($str),+];
        }

        impl $crate::module::DropReason for $name {
            #[inline(always)]
            fn index(self) -> usize {
                self as usize
            }
            fn name(self) -> &'static str {
                Self::NAMES[self as usize]
            }
        }
    };
}

/// The drop reasons every class has, counted after the class's own (in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoreDrop {
    /// Packets sent to an unconnected output gate.
    Deadend,
    /// Packets a module left unhandled.
    Unhandled,
    /// Packets still circling a graph loop after `exec::MAX_HOPS` module runs in one task.
    HopLimit,
}

impl CoreDrop {
    /// The printed names, in counter order (after the class's reasons).
    pub const NAMES: &'static [&'static str] = &["deadend", "unhandled", "hop_limit"];

    /// Counter offset past the class's own reasons.
    #[inline(always)]
    pub(crate) const fn offset(self) -> usize {
        self as usize
    }
}

/// Core reasons' ids: `CORE_BASE + offset`, past any class's reasons.
pub(crate) const CORE_BASE: usize = usize::MAX - 3;

impl DropReason for CoreDrop {
    #[inline(always)]
    fn index(self) -> usize {
        CORE_BASE + self.offset()
    }
    fn name(self) -> &'static str {
        Self::NAMES[self.offset()]
    }
}

#[cfg(test)]
mod tests {
    use super::{CoreDrop, DropReason};

    crate::drop_reasons! {
        /// Shared reasons.
        pub enum Base { A = "a", B = "b" }
    }

    crate::drop_reasons! {
        /// A class's own reasons after the embedded ones.
        pub enum Own { Base(Base), C = "c", D = "d" }
    }

    #[test]
    fn drop_reason_enums_give_index_and_name() {
        assert_eq!(Base::NAMES, ["a", "b"]);
        assert_eq!((Base::B.index(), Base::B.name()), (1, "b"));
        assert_eq!(Own::NAMES, ["a", "b", "c", "d"]);
        for (i, r) in [Own::Base(Base::A), Own::from(Base::B), Own::C, Own::D]
            .into_iter()
            .enumerate()
        {
            assert_eq!((r.index(), r.name()), (i, Own::NAMES[i]));
        }
        for (i, r) in [CoreDrop::Deadend, CoreDrop::Unhandled, CoreDrop::HopLimit]
            .into_iter()
            .enumerate()
        {
            assert_eq!(r.name(), CoreDrop::NAMES[i]);
            assert!(r.index() > 1 << 32, "past any class's reasons");
        }
    }
}
