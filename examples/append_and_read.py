"""Append a few payments to the example table sales.payments and read them back.

The table was created by `olympia apply examples/catalog` as a real Iceberg table; any
pyiceberg client writes and reads it through Olympia's catalog::

    python examples/append_and_read.py CATALOG_URI

Each run appends three new payments (one Olympia version) and prints every row of the
table; it exits with 1 if the rows it appended do not read back exactly.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
from pyiceberg.exceptions import NoSuchIcebergTableError

from olympia.iceberg import OlympiaCatalog


def main(uri: str) -> int:
    catalog = OlympiaCatalog("demo", uri=uri)
    try:
        try:
            table = catalog.load_table("sales.payments")
        except NoSuchIcebergTableError:
            print(f"sales.payments in {uri} has no Iceberg metadata: the catalog was made "
                  "without a warehouse property (olympia init --property warehouse=URI); "
                  "remove it and run `make demo` again", file=sys.stderr)
            return 1
        start = len(table.scan().to_arrow()) + 1
        day = datetime(2026, 11, 23, 9, 30, tzinfo=UTC)
        rows = pa.Table.from_pylist([
            {"payment_id": start + i, "order_id": 1000 + i, "method": method,
             "amount": Decimal(f"{12 + i}.50"), "paid_at": day + timedelta(hours=i)}
            for i, method in enumerate(["card", "transfer", "card"])
        ], schema=table.schema().as_arrow())
        table.append(rows)
        read = table.scan(row_filter=f"payment_id >= {start}").to_arrow().sort_by("payment_id")
        every = table.scan().to_arrow().sort_by("payment_id")
        print(f"Appended {len(rows)} rows to sales.payments as catalog version "
              f"{catalog.olympia.refresh()}; the table now holds {len(every)}:")
        for row in every.to_pylist():
            print(f"  {row['payment_id']:>4}  order {row['order_id']}  {row['method']:<8} "
                  f"{row['amount']:>8}  {row['paid_at'].isoformat()}")
        if read.to_pylist() != rows.to_pylist():
            print("The appended rows did not read back exactly", file=sys.stderr)
            return 1
        return 0
    finally:
        catalog.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[0], "\nusage: append_and_read.py CATALOG_URI",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
