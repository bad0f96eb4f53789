"""The package's public names (issue 27: dir(tubelet) showed np, os, json, tempfile, ...)."""
import ast
from pathlib import Path

import tubelet


def test_public_names_are_all():
    # issue 39: dir() showed the private helpers (_json, _os, ...) too, which docs/python.md
    # says it does not
    assert set(dir(tubelet)) == set(tubelet.__all__)
    for n in tubelet.__all__:
        assert hasattr(tubelet, n), n


def test_stubs_match_all():
    """__init__.pyi declares exactly __all__'s names (and the same __all__)."""
    stub = ast.parse((Path(tubelet.__file__).parent / "__init__.pyi").read_text())
    names, declared_all = set(), None
    for node in stub.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id == "__all__":
                    declared_all = set(ast.literal_eval(node.value))
                elif isinstance(t, ast.Name):
                    names.add(t.id)
    public = {n for n in names if not n.startswith("_") or n == "__version__"}
    assert public == set(tubelet.__all__)
    assert declared_all == set(tubelet.__all__)
