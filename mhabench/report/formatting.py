"""How a value prints in a report table (HTML and Markdown alike)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def format_value(value: Any) -> str:
    """About three significant digits, thousands separators, n/a for missing values."""
    if value is None or value is pd.NA:
        return "n/a"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if not isinstance(value, (float, np.floating)):
        return str(value)
    v = float(value)
    if math.isnan(v):
        return "n/a"
    a = abs(v)
    if math.isinf(v) or a == 0:
        return str(v).replace(".0", "")
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:.{2 - int(math.floor(math.log10(a)))}f}"
    return f"{v:.3g}"


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))
