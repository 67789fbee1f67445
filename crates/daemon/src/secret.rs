//! Secret comparison shared by the gRPC server and the HTTP endpoints (a module of its own,
//! so that neither imports the other for it).

/// Compares without stopping at the first difference, so timing does not reveal the token.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
