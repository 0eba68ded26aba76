"""Turning an invoice into text: a fixed-width layout, a CSV export, a reminder.

The fixed-width layout is what the shop pastes into emails and prints on
the receipt printer, so every row fits in ``width`` characters: long
descriptions are cut with an ellipsis rather than wrapped. The CSV export
has one row per line item and is what the accounting tool imports.
"""

from __future__ import annotations

import csv
import io
from datetime import date
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tally.invoice import Invoice

CSV_HEADER = (
    "invoice",
    "line",
    "description",
    "quantity",
    "unit_price",
    "discount",
    "net",
    "tax",
    "currency",
)


def render_text(invoice: Invoice, width: int = 64) -> str:
    """The invoice as fixed-width text; the discount column only appears when a line has one."""
    show_discount = any(line.discount is not None for line in invoice.lines)
    rows = [
        f"Invoice {invoice.number}".ljust(width - 20) + f"Issued {invoice.issued.isoformat()}",
        f"Bill to: {invoice.customer}",
        f"Terms: {invoice.terms.name} (due {invoice.due_date.isoformat()})",
        "-" * width,
    ]
    for line in invoice.lines:
        left = f"{line.quantity} x {line.description}"
        right = str(line.net)
        if show_discount and not line.discount_amount.is_zero():
            right = f"(-{line.discount_amount.amount}) {right}"
        rows.append(columns(left, right, width))
    rows.append("-" * width)
    rows.append(columns("Subtotal", str(invoice.subtotal), width))
    if not invoice.discount_total.is_zero():
        rows.append(columns("Discounts", str(-invoice.discount_total), width))
    for label, amount in invoice.tax_breakdown().items():
        rows.append(columns(label, str(amount), width))
    rows.append(columns("Total", str(invoice.total), width))
    if invoice.payments:
        rows.append(columns("Paid", str(-invoice.paid), width))
        rows.append(columns("Balance due", str(invoice.balance_due), width))
    return "\n".join(rows)


def columns(left: str, right: str, width: int) -> str:
    """``left`` and ``right`` on one row of ``width`` characters, cutting ``left`` if needed.

    >>> columns("Total", "USD 9.50", 20)
    'Total       USD 9.50'
    """
    room = width - len(right) - 1
    if len(left) > room:
        left = left[: room - 1] + "…"
    return left.ljust(room) + " " + right


def render_csv(invoice: Invoice) -> str:
    """One CSV row per line item, amounts as plain decimals, for the accounting import."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for number, line in enumerate(invoice.lines, start=1):
        writer.writerow(
            (
                invoice.number,
                number,
                line.description,
                line.quantity,
                line.unit_price.amount,
                line.discount_amount.amount,
                line.net.amount,
                line.tax.amount,
                invoice.currency,
            )
        )
    return buffer.getvalue()


def render_reminder(invoice: Invoice, today: date) -> str:
    """A short payment reminder, or an empty string when nothing is overdue."""
    late = invoice.days_overdue(today)
    if late == 0:
        return ""
    days = "day" if late == 1 else "days"
    return (
        f"Dear {invoice.customer},\n\n"
        f"invoice {invoice.number} for {invoice.total.format()} was due on "
        f"{invoice.due_date.isoformat()} and is now {late} {days} overdue. "
        f"The balance due is {invoice.balance_due.format()}.\n\n"
        "If you have already paid, please ignore this message."
    )
