"""Payment terms: when an invoice is due, and early-payment discounts.

Supported terms, as customers write them on purchase orders:

- ``"due on receipt"``: due the day the invoice is issued;
- ``"net 30"``: due 30 days after the issue date;
- ``"eom 30"``: due 30 days after the end of the month of issue;
- ``"2/10 net 30"``: 2% off when paid within 10 days, else due in 30.

A due date that falls on a Saturday or Sunday moves to the following
Monday. Holidays are not considered for due dates; ``add_business_days``
takes an explicit holiday list for callers that need them.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

SATURDAY = 5

_EARLY = re.compile(r"^(\d+(?:\.\d+)?)/(\d+)\s+net\s+(\d+)$")
_NET = re.compile(r"^net\s*(\d+)$")
_EOM = re.compile(r"^eom\s*(\d+)$")


@dataclass(frozen=True)
class PaymentTerms:
    """When payment is due, counted in calendar days from the issue date."""

    name: str
    days: int = 30
    end_of_month: bool = False
    early_days: int | None = None
    early_rate: Decimal = Decimal(0)

    def __post_init__(self) -> None:
        if self.days < 0:
            raise ValueError("days must not be negative")
        if self.early_days is not None and not 0 < self.early_days <= self.days:
            raise ValueError("the early-payment window must end before the due date")

    def due_date(self, issued: date) -> date:
        """The due date for an invoice issued on ``issued``, moved off weekends."""
        start = end_of_month(issued) if self.end_of_month else issued
        return next_weekday(start + timedelta(days=self.days))

    def early_deadline(self, issued: date) -> date | None:
        """The last day the early-payment discount applies, if these terms have one."""
        if self.early_days is None:
            return None
        return issued + timedelta(days=self.early_days)

    def early_discount_applies(self, issued: date, paid: date) -> bool:
        deadline = self.early_deadline(issued)
        return deadline is not None and paid <= deadline


DUE_ON_RECEIPT = PaymentTerms("Due on receipt", days=0)
NET_15 = PaymentTerms("Net 15", days=15)
NET_30 = PaymentTerms("Net 30", days=30)
NET_60 = PaymentTerms("Net 60", days=60)


def parse_terms(text: str) -> PaymentTerms:
    """Read terms as written on a purchase order (see the module docstring)."""
    cleaned = " ".join(text.lower().split())
    if cleaned in ("due on receipt", "on receipt", "cod"):
        return DUE_ON_RECEIPT
    match = _NET.match(cleaned)
    if match:
        days = int(match.group(1))
        return PaymentTerms(f"Net {days}", days=days)
    match = _EOM.match(cleaned)
    if match:
        days = int(match.group(1))
        return PaymentTerms(f"EOM {days}", days=days, end_of_month=True)
    match = _EARLY.match(cleaned)
    if match:
        percent, early, days = match.groups()
        return PaymentTerms(
            f"{percent}/{early} Net {days}",
            days=int(days),
            early_days=int(early),
            early_rate=Decimal(percent) / 100,
        )
    raise ValueError(f"unrecognised payment terms: {text!r}")


def end_of_month(day: date) -> date:
    """The last day of ``day``'s month."""
    last = calendar.monthrange(day.year, day.month)[1]
    return day.replace(day=last)


def next_weekday(day: date) -> date:
    """``day`` itself on Monday to Friday, else the following Monday."""
    while day.weekday() >= SATURDAY:
        day += timedelta(days=1)
    return day


def add_business_days(start: date, days: int, holidays: Iterable[date] = ()) -> date:
    """The date ``days`` business days after ``start``, skipping weekends and ``holidays``."""
    if days < 0:
        raise ValueError("days must not be negative")
    closed = set(holidays)
    current = start
    remaining = days
    while remaining:
        current += timedelta(days=1)
        if current.weekday() < SATURDAY and current not in closed:
            remaining -= 1
    return current


def days_overdue(due: date, today: date) -> int:
    """Whole days past ``due`` on ``today``; 0 when not yet overdue."""
    return max(0, (today - due).days)
