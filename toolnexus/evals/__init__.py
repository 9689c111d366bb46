"""Evaluate an agent on a dataset: cases in parallel, scored, reported, compared.

```python
from toolnexus.evals import Case, evaluate, exact

report = evaluate(my_agent, [Case("capital", "Capital of France?", expected="Paris")], [exact()])
print(report.to_markdown())
```

Everything here is synchronous: cases run on a pool of plain threads.
"""

from .dataset import Case, Dataset
from .report import Report
from .results import CaseResult, Comparison, Regression
from .runner import evaluate
from .scoring import Score, contains, exact, judge, matches

__all__ = [
    "Case",
    "CaseResult",
    "Comparison",
    "Dataset",
    "Regression",
    "Report",
    "Score",
    "contains",
    "evaluate",
    "exact",
    "judge",
    "matches",
]
