"""The estimators' docstrings, written out in full, agree where they describe the same thing.

Each class's docstring is plain text in its class (no assembly at import), so a
paragraph shared by several depths is written several times: these tests keep
the copies identical, every constructor parameter documented, and every
documented default the signature's.
"""

from __future__ import annotations

import ast
import inspect
import re

import pytest

import daskdepth
from daskdepth.estimators.known import ESTIMATORS

#: Paragraphs every class that documents them must word identically.
SHARED = ("covariance", "support_fraction", "tol", "contamination", "affine_invariant",
          "frame_eigenvalues_", "n_samples_fit_", "n_features_in_")
#: The depths on one engine (the mean and minimum of univariate depths), which share
#: every paragraph but these (IRW's covariance is informative only; the halfspace depth
#: has no n_directions='auto', and its basis_ comes with affine_invariant=True, not with
#: a frame).
FAMILY = ("AIIRW", "IRW", "Halfspace")
FAMILY_DIFFERS = ("covariance_", "n_directions", "basis_")


def entries(doc: str, section: str) -> dict[str, str]:
    """The entries (``name : type`` and their indented text) of a numpydoc section."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == section)
    assert set(lines[start + 1].strip()) == {"-"}, f"{section} has no underline"
    out: dict[str, list[str]] = {}
    name = None
    for line in lines[start + 2:]:
        if line.strip() and not line.startswith("    "):
            break
        if re.match(r"^    \S", line):
            if set(line.strip()) == {"-"} or " : " not in line:
                break  # the next section's title or underline
            name = line.strip().split(" : ")[0]
            out[name] = [line.strip()]
        elif name is not None and line.strip():
            out[name].append(line.strip())
    return {k: "\n".join(v) for k, v in out.items()}


def classes() -> dict[str, type]:
    return dict(ESTIMATORS)


def documented(section: str) -> dict[str, dict[str, str]]:
    """Per entry name, its text in each class that documents it."""
    by_name: dict[str, dict[str, str]] = {}
    for name, cls in classes().items():
        for entry, text in entries(cls.__doc__, section).items():
            by_name.setdefault(entry, {})[name] = text
    return by_name


def test_every_registered_class_is_checked():
    assert set(FAMILY) <= set(classes())
    assert {"HalfspaceMass", "Projection"} <= set(classes())


@pytest.mark.parametrize("section", ["Parameters", "Attributes"])
def test_shared_paragraphs_are_identical(section):
    for entry, texts in documented(section).items():
        if entry in SHARED:
            assert len(set(texts.values())) == 1, f"{entry} is worded differently in {texts}"
        family = {c: t for c, t in texts.items() if c in FAMILY}
        if entry not in FAMILY_DIFFERS and len(family) > 1:
            assert len(set(family.values())) == 1, \
                f"{entry} is worded differently in {sorted(family)}"


@pytest.mark.parametrize("name", sorted(classes()))
def test_parameters_documented_with_their_defaults(name):
    cls = classes()[name]
    params = entries(cls.__doc__, "Parameters")
    signature = inspect.signature(cls.__init__).parameters
    assert set(params) == set(signature) - {"self"}
    for param, text in params.items():
        default = signature[param].default
        match = re.search(r"default=(\S+)$", text.splitlines()[0])
        assert match, f"{name}.{param} documents no default"
        if isinstance(default, (bool, int, float, str)) or default is None:
            assert ast.literal_eval(match.group(1)) == default, \
                f"{name}.{param}: documented default={match.group(1)}, signature {default!r}"


@pytest.mark.parametrize("name", sorted(classes()))
def test_a_class_documents_the_attributes_it_has(name):
    """The Attributes section lists what fit sets for this class: no more, no less.

    The public names of ``_fitted_attributes`` and ``_optional_fitted_attributes``
    (what the class declares it sets, and what a saved model of it may hold); an
    attribute is never described as another depth's only.
    """
    cls = classes()[name]
    documented = entries(cls.__doc__, "Attributes")
    declared = {attr for attr in (*cls._fitted_attributes, *cls._optional_fitted_attributes)
                if not attr.startswith("_")}
    assert set(documented) == declared, (
        f"{name} documents {sorted(set(documented) - declared)} it does not set and "
        f"leaves out {sorted(declared - set(documented))}")
    for attr, text in documented.items():
        for other in classes().values():
            only = rf"(?<![\w-]){re.escape(other.display_name)} only"
            assert other is cls or not re.search(only, text), \
                f"{name}.{attr} is described as {other.display_name}'s only"


def test_the_docstrings_are_written_out():
    """No class docstring is assembled at import (Sphinx and editors show the source)."""
    for cls in classes().values():
        source = inspect.getsource(cls)
        assert "__doc__ =" not in source, f"{cls.__name__} assembles its docstring"
        assert inspect.getdoc(cls).startswith(source.split('"""')[1].strip()[:40])


def test_public_names_have_docstrings():
    for name in daskdepth.__all__:
        obj = getattr(daskdepth, name)
        if callable(obj):
            assert inspect.getdoc(obj), f"daskdepth.{name} has no docstring"
