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


def size_text(nbytes: Any) -> str:
    """Bytes in binary units ("23.5 GiB"); text that is not a byte count as it is ("24GB")."""
    try:
        value = float(nbytes)
    except (TypeError, ValueError):
        return "" if nbytes is None else str(nbytes)
    if math.isnan(value):
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{format_value(value)} {unit}"
        value /= 1024
    return f"{format_value(value)} TiB"


def date_text(stamp: Any) -> str:
    """A timestamp as "2026-12-01 17:50 UTC" (asv records UTC); "" when unknown."""
    if stamp is None or pd.isna(stamp):
        return ""
    return pd.Timestamp(stamp).strftime("%Y-%m-%d %H:%M UTC")
