//! Classifiers: modules that choose an output gate per packet from its headers or metadata.

pub mod acl;
pub mod acl_index;
pub mod bpf;
pub mod bpf_compile;
mod cbpf;
pub mod exact_match;
pub mod hash_lb;
pub mod ip_lookup;
pub mod l2_forward;
pub mod table;
pub mod tuple_table;
pub mod url_filter;
pub mod vlan_split;
pub mod wildcard_match;
pub mod worker_split;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &acl::CLASS,
    &bpf::CLASS,
    &exact_match::CLASS,
    &hash_lb::CLASS,
    &ip_lookup::CLASS,
    &l2_forward::CLASS,
    &url_filter::CLASS,
    &vlan_split::CLASS,
    &wildcard_match::CLASS,
    &worker_split::CLASS,
];

#[cfg(test)]
mod tests {
    #[test]
    fn classes_are_registered_under_bess_names() {
        for (name, template) in [
            ("ACL", "acl"),
            ("BPF", "bpf"),
            ("ExactMatch", "em"),
            ("HashLB", "hash_lb"),
            ("IPLookup", "ip_lookup"),
            ("L2Forward", "l2_forward"),
            ("UrlFilter", "url-filter"),
            ("VLANSplit", "vlan_split"),
            ("WildcardMatch", "wm"),
            ("WorkerSplit", "ws"),
        ] {
            let c = crate::find(name).unwrap_or_else(|| panic!("{name} is not registered"));
            assert_eq!(c.name_template, template);
        }
    }
}
