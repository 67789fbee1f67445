//! The symbolic execution of one classic-BPF program into its accepting paths: each a list
//! of conditions on packet fields (see the parent module).

use super::*;

/// A packet quantity programs test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// Bytes loaded (1, 2, 4), or 0 for the packet length.
    pub(super) size: u8,
    /// For an indexed load: X = 4 * (byte at this offset & 0xf); None: X = `xc`.
    pub(super) msh: Option<u32>,
    pub(super) xc: u32,
    pub(super) off: u32,
    pub(super) mask: u32,
}

impl Field {
    pub(super) fn load(size: u8, msh: Option<u32>, xc: u32, off: u32) -> Field {
        Field {
            size,
            msh,
            xc,
            off,
            mask: u32::MAX,
        }
    }

    /// The same load without the AND: whether it is valid does not depend on the mask.
    pub(super) fn unmasked(self) -> Field {
        Field {
            mask: u32::MAX,
            ..self
        }
    }
}

/// A comparison a jump makes against a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Test {
    Eq(u32),
    Gt(u32),
    Ge(u32),
    Set(u32),
}

impl Test {
    #[inline(always)]
    pub(super) fn holds(self, v: u32) -> bool {
        match self {
            Test::Eq(k) => v == k,
            Test::Gt(k) => v > k,
            Test::Ge(k) => v >= k,
            Test::Set(k) => v & k != 0,
        }
    }
}

/// One accepting path of a program: conditions (field, test, outcome) and every load made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSpec {
    pub(super) conds: Vec<(Field, Test, bool)>,
    pub(super) loads: Vec<Field>,
}

/// What symbolic execution knows of a register or scratch word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sym {
    Const(u32),
    Field(Field),
    /// 4 * (byte at k & 0xf): the IPv4 header length idiom (only ever used as X).
    Msh(u32),
}

#[derive(Clone)]
pub(super) struct State {
    pub(super) pc: usize,
    pub(super) a: Sym,
    pub(super) x: Sym,
    pub(super) mem: [Option<Sym>; 16],
    pub(super) conds: Vec<(Field, Test, bool)>,
    pub(super) loads: Vec<Field>,
}

/// Most paths (accepting or not) one program may have before it is left to the interpreter.
pub(super) const MAX_PATHS: usize = 256;

/// The accepting paths of a validated, decoded program, or None when it does something the
/// analysis does not model (the interpreter then runs it).
pub fn analyse(prog: &[Op]) -> Option<Vec<PathSpec>> {
    let mut out = Vec::new();
    let mut stack = vec![State {
        pc: 0,
        a: Sym::Const(0),
        x: Sym::Const(0),
        mem: [None; 16],
        conds: Vec::new(),
        loads: Vec::new(),
    }];
    let mut paths = 0usize;
    while let Some(mut s) = stack.pop() {
        paths += 1;
        if paths > MAX_PATHS {
            return None;
        }
        loop {
            let op = *prog.get(s.pc)?;
            s.pc += 1;
            let ld = |s: &mut State, size: u8, ind: bool, k: u32| -> Option<Sym> {
                let f = if !ind {
                    Field::load(size, None, 0, k)
                } else {
                    match s.x {
                        Sym::Const(c) => Field::load(size, None, c, k),
                        Sym::Msh(m) => Field::load(size, Some(m), 0, k),
                        Sym::Field(_) => return None,
                    }
                };
                if let Some(m) = f.msh {
                    s.loads.push(Field::load(1, None, 0, m));
                }
                s.loads.push(f);
                Some(Sym::Field(f))
            };
            // Jump: Some(outcome) when decided, None when the path forks on a field.
            let mut cond = |v: Sym, s: &mut State, t: Test, jt: u8, jf: u8| -> Option<()> {
                match v {
                    Sym::Const(c) => {
                        s.pc += if t.holds(c) { jt } else { jf } as usize;
                        Some(())
                    }
                    Sym::Field(f) => {
                        let mut other = s.clone();
                        other.conds.push((f, t, false));
                        other.pc += jf as usize;
                        stack.push(other);
                        s.conds.push((f, t, true));
                        s.pc += jt as usize;
                        Some(())
                    }
                    Sym::Msh(_) => None,
                }
            };
            match op {
                Op::LdAbsW(k) => s.a = ld(&mut s, 4, false, k)?,
                Op::LdAbsH(k) => s.a = ld(&mut s, 2, false, k)?,
                Op::LdAbsB(k) => s.a = ld(&mut s, 1, false, k)?,
                Op::LdIndW(k) => s.a = ld(&mut s, 4, true, k)?,
                Op::LdIndH(k) => s.a = ld(&mut s, 2, true, k)?,
                Op::LdIndB(k) => s.a = ld(&mut s, 1, true, k)?,
                Op::LdLen => s.a = Sym::Field(Field::load(0, None, 0, 0)),
                Op::LdxLen => s.x = Sym::Field(Field::load(0, None, 0, 0)),
                Op::LdImm(k) => s.a = Sym::Const(k),
                Op::LdxImm(k) => s.x = Sym::Const(k),
                Op::LdMem(m) => s.a = s.mem[m as usize]?,
                Op::LdxMem(m) => s.x = s.mem[m as usize]?,
                Op::LdxMsh(k) => {
                    s.loads.push(Field::load(1, None, 0, k));
                    s.x = Sym::Msh(k);
                }
                Op::St(m) => s.mem[m as usize] = Some(s.a),
                Op::Stx(m) => s.mem[m as usize] = Some(s.x),
                Op::Alu(..) | Op::AluX(_) => {
                    let (o, v) = match (op, s.x) {
                        (Op::Alu(o, k), _) => (o, k),
                        (Op::AluX(o), Sym::Const(c)) => (o, c),
                        _ => return None,
                    };
                    match s.a {
                        Sym::Const(a) => match alu(o, a, v) {
                            Some(r) => s.a = Sym::Const(r),
                            // Division by zero: the program returns 0 here.
                            None => break,
                        },
                        Sym::Field(mut f) if o == AND => {
                            f.mask &= v;
                            s.a = Sym::Field(f);
                        }
                        _ => return None,
                    }
                }
                Op::Ja(k) => s.pc += k as usize,
                Op::JeqK(k, t, f) => cond(s.a, &mut s, Test::Eq(k), t, f)?,
                Op::JgtK(k, t, f) => cond(s.a, &mut s, Test::Gt(k), t, f)?,
                Op::JgeK(k, t, f) => cond(s.a, &mut s, Test::Ge(k), t, f)?,
                Op::JsetK(k, t, f) => cond(s.a, &mut s, Test::Set(k), t, f)?,
                Op::JeqX(t, f) | Op::JgtX(t, f) | Op::JgeX(t, f) | Op::JsetX(t, f) => {
                    let Sym::Const(k) = s.x else { return None };
                    let test = match op {
                        Op::JeqX(..) => Test::Eq(k),
                        Op::JgtX(..) => Test::Gt(k),
                        Op::JgeX(..) => Test::Ge(k),
                        _ => Test::Set(k),
                    };
                    cond(s.a, &mut s, test, t, f)?
                }
                Op::RetK(k) => {
                    if k != 0 {
                        out.push(PathSpec {
                            conds: s.conds,
                            loads: s.loads,
                        });
                    }
                    break;
                }
                Op::RetA => {
                    match s.a {
                        Sym::Const(0) => {}
                        Sym::Const(_) => out.push(PathSpec {
                            conds: s.conds,
                            loads: s.loads,
                        }),
                        Sym::Field(f) => {
                            s.conds.push((f, Test::Set(u32::MAX), true));
                            out.push(PathSpec {
                                conds: s.conds,
                                loads: s.loads,
                            });
                        }
                        Sym::Msh(_) => return None,
                    }
                    break;
                }
                Op::Tax => s.x = s.a,
                Op::Txa => s.a = s.x,
                Op::Bad => break,
            };
        }
    }
    Some(out)
}
