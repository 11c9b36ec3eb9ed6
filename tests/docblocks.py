"""Running the Python blocks of a Markdown page (the README, the manual's guide pages) in one
namespace, in order, checking the output their comments promise.

The pages show the default, 2048-bit keys; the blocks run with one documented substitution,
:data:`DEMO_KEYS` (demo keys, ``insecure=True``: 512 bits, 1024 for federated transfer,
whose packed slots need them), whose ``SecurityWarning`` is required rather than hidden.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

# `print(...)  # {...}` or `# True False ...`: the output the README promises
PROMISED = re.compile(r"print\(.*\)\s+# (\{.*\}|(?:True|False)(?: True| False)*)$", flags=re.M)
# the one substitution: the estimators' default keys -> demo keys (512 bits; federated
# transfer packs its embeddings' slots into 1024)
DEMO_KEYS = (
    re.compile(
        r"\b(Vertical(?:Logistic|Linear|Poisson)Regression|FederatedTransferClassifier"
        r"|SecureBoost(?:Classifier|Regressor))\((?!.*key_bits)"
    ),
    lambda found: (
        f"{found[1]}(key_bits={1024 if found[1] == 'FederatedTransferClassifier' else 512}, "
        "insecure=True, "
    ),
)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def run_blocks(blocks: list[str], source: Path) -> None:
    """Run ``blocks`` in one namespace, in order, each with the demo keys; check the promises."""
    from vfl.crypto import SecurityWarning

    namespace: dict[str, object] = {"__name__": "docs_example"}
    for block in blocks:
        code, substituted = DEMO_KEYS[0].subn(DEMO_KEYS[1], block)
        out = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
            warnings.simplefilter("always", SecurityWarning)
            exec(compile(code, str(source), "exec"), namespace)
        if substituted:  # the demo keys warn, as they must
            assert any(issubclass(w.category, SecurityWarning) for w in caught)
        for promised in PROMISED.findall(block):
            assert promised in out.getvalue(), (source.name, promised, out.getvalue())
