//! Encapsulation and decapsulation: modules that add or remove headers.
pub mod esp;
pub mod esp_decap;
pub mod esp_encap;
pub mod ether_encap;
pub mod generic_decap;
pub mod generic_encap;
pub mod ip_encap;
pub mod mpls_pop;
pub mod vlan_pop;
pub mod vlan_push;
pub mod vxlan_decap;
pub mod vxlan_encap;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &esp_decap::CLASS,
    &esp_encap::CLASS,
    &ether_encap::CLASS,
    &generic_decap::CLASS,
    &generic_encap::CLASS,
    &ip_encap::CLASS,
    &mpls_pop::CLASS,
    &vlan_pop::CLASS,
    &vlan_push::CLASS,
    &vxlan_decap::CLASS,
    &vxlan_encap::CLASS,
];

#[cfg(test)]
pub(crate) mod testutil {
    //! Test helpers shared by the encapsulation tests.
    use bessemer_core::{Context, Instance, Module, ModuleClass, PacketBatch, Value};

    pub use crate::headers::test_util::hex;

    struct EatHeadroom;

    impl Module for EatHeadroom {
        fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
            for p in batch.pkts_mut() {
                // Grow into all the headroom, then drop the grown bytes from the view again
                // by moving the start back: the data keeps its bytes but has no headroom.
                let len = p.len();
                let h = p.headroom();
                let d = p.prepend(h).expect("headroom");
                d.fill(0);
                let data = p.data().to_vec();
                p.data_mut()[..len].copy_from_slice(&data[h..]);
                assert!(p.trim(h));
            }
            ctx.forward(0, batch);
        }
    }

    /// Test-only class: moves each packet's bytes to the very front of its frame so it has
    /// no headroom left (for the `no_headroom` drop paths).
    pub static EAT_HEADROOM: ModuleClass = ModuleClass {
        name: "TestEatHeadroom",
        name_template: "eat",
        help: "leaves packets without headroom",
        arg_type: "EmptyArg",
        arg_doc: &[],
        igates: 1,
        ogates: 1,
        commands: &[],
        drop_reasons: &[],
        max_workers: 1,
        create: |_, _| Ok(Instance::Exclusive(Box::new(EatHeadroom))),
    };

    /// A SetMetadata argument setting constant attributes: (name, bytes).
    pub fn set_meta(attrs: &[(&str, &[u8])]) -> Value {
        Value::map().with(
            "attrs",
            Value::List(
                attrs
                    .iter()
                    .map(|(n, b)| {
                        Value::map()
                            .with("name", *n)
                            .with("size", b.len())
                            .with("value_bin", b.to_vec())
                    })
                    .collect(),
            ),
        )
    }

    /// Packets a module dropped, under all reasons.
    pub fn all_drops(h: &bessemer_core::testing::Harness, module: &str) -> u64 {
        h.graph
            .drops_of(module)
            .unwrap()
            .into_iter()
            .map(|(_, n)| n)
            .sum()
    }

    /// True if every element of `out` is a suffix of a distinct element of `inp`, in order.
    pub fn suffixes_in_order(out: &[Vec<u8>], inp: &[Vec<u8>]) -> bool {
        let mut it = inp.iter();
        out.iter()
            .all(|o| it.by_ref().any(|i| i.len() >= o.len() && i.ends_with(o)))
    }
}
