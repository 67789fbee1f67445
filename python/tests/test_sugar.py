import pytest

from bessemer.sugar import SugarError, translate


class Mod:
    """A stand-in module: records connections made with the translated operators."""

    edges: list = []

    def __init__(self, *args, name=None, **kw):
        self.name = name
        self.args = args
        self.kw = kw

    def __mul__(self, ogate):
        return Gate(self, ogate, None)

    def __rmul__(self, igate):
        return Gate(self, None, igate)

    def __rshift__(self, other):
        return Gate(self, 0, None) >> other


class Gate:
    def __init__(self, m, og, ig):
        self.m, self.og, self.ig = m, og, ig

    def __rshift__(self, other):
        dst = other if isinstance(other, Gate) else Gate(other, None, 0)
        Mod.edges.append((self.m.name, self.og or 0, dst.m.name, dst.ig or 0))
        return dst.m


def run(src, env=None):
    Mod.edges = []
    scope = {
        "Source": Mod,
        "Sink": Mod,
        "RoundRobin": Mod,
        "__bess_env__": lambda k, d=None: (env or {}).get(k, d),
    }
    exec(compile(translate(src), "t.bess", "exec"), scope)
    return scope


def test_named_modules_and_chains():
    s = run("src::Source(pkt_size=60) -> rr::RoundRobin(gates=[0, 1])\nrr:1 -> 0:out::Sink()\n")
    assert s["src"].name == "src" and s["src"].kw == {"pkt_size": 60}
    assert s["out"].name == "out"
    assert Mod.edges == [("src", 0, "rr", 0), ("rr", 1, "out", 0)]


def test_gates_with_names_and_continuations():
    s = run("a::Source()\nb::Sink()\ng = 3\na:g -> \\\n  2:b\n")
    assert Mod.edges == [("a", 3, "b", 2)]
    assert s["b"].kw == {}


def test_env_lookups_with_defaults():
    s = run("x = $SIZE!'60'\ny = $N!-3\nz = $MISSING\n", env={"SIZE": "128"})
    assert (s["x"], s["y"], s["z"]) == ("128", -3, None)


def test_line_numbers_are_kept():
    src = "a::Source()\n\n\nundefined_name -> a\n"
    with pytest.raises(NameError) as ei:
        run(src)
    tb = ei.tb
    while tb.tb_next:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_filename == "t.bess" and tb.tb_lineno == 4


def test_plain_python_is_untouched():
    src = "d = {'a': 1}\nl = [1, 2, 3][::2]\nf = lambda x: x\ndef g(x) -> int:\n    return x\n"
    assert translate(src) == src


def test_errors_name_the_problem():
    with pytest.raises(SugarError, match="variable name"):
        translate("x = $ 5\n")
    with pytest.raises(SugarError, match="default value"):
        translate("x = $A!\n")


def test_trailing_comma_in_module_args():
    s = run("m::Source(pkt_size=1,)\n")
    assert s["m"].kw == {"pkt_size": 1} and s["m"].name == "m"


def test_env_var_in_a_def_line_is_translated():
    s = run("def f(n=$N!'3') -> int:\n    return int(n)\n", env={})
    assert s["f"]() == 3
    s = run("def f(n=$N!'3') -> int:\n    return int(n)\n", env={"N": "7"})
    assert s["f"]() == 7
