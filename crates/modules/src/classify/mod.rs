//! Classifiers: modules that choose an output gate per packet from its headers or metadata.

pub mod acl;
pub mod bpf;
pub mod hash_lb;
pub mod url_filter;
pub mod vlan_split;
pub mod worker_split;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &acl::CLASS,
    &bpf::CLASS,
    &hash_lb::CLASS,
    &url_filter::CLASS,
    &vlan_split::CLASS,
    &worker_split::CLASS,
];

#[cfg(test)]
mod tests {
    #[test]
    fn acl_helpers_classes_are_registered_under_bess_names() {
        for (name, template) in [
            ("ACL", "acl"),
            ("BPF", "bpf"),
            ("HashLB", "hash_lb"),
            ("UrlFilter", "url-filter"),
            ("VLANSplit", "vlan_split"),
            ("WorkerSplit", "ws"),
        ] {
            let c = crate::find(name).unwrap_or_else(|| panic!("{name} is not registered"));
            assert_eq!(c.name_template, template);
        }
    }
}
