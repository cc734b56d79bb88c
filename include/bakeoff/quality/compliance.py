"""Traffic compliance (in the spirit of MLPerf TEST06) on the benchmark's own requests.

Latency checks say the numbers are sane; these say the server did what was asked, so a server
that stops early or skips the usage chunk cannot look faster than it is. Runs as a GX suite on
the prepared requests frame (``suites.prepare_requests``; ``suites.checks_for`` pairs them),
successful requests only. Token-exact checks use rows whose counts came from the server's ``usage``; rows counted by the
client are flagged by the usage check instead.

Limitation: the requests table records text-bearing chunks only, so "the first chunk carries
text" is checked as "a successful request streamed text, and its TTFT is the first text chunk's
arrival"; when the client also records ``first_chunk_has_text`` it is checked directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import great_expectations as gx
import great_expectations.expectations as gxe
from great_expectations.expectations.row_conditions import Column

from bakeoff.quality.gx import OK, make_suite

if TYPE_CHECKING:
    from bakeoff.plan import Plan
    from bakeoff.plan.target import Target

USAGE = Column("tokens_source") == "usage"
NO_EOS = Column("ignore_eos") == True  # noqa: E712


def suite(plan: Plan, target: Target, first_chunk_flag: bool = False) -> gx.ExpectationSuite:
    exps: list[gxe.Expectation] = [
        gxe.ExpectColumnValuesToNotBeNull(
            column="tokens_source",
            row_condition=OK,
            meta={"why": "usage present: the token count's source is recorded"},
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="tokens_source",
            value_set=["usage"],
            row_condition=OK,
            meta={"why": "usage present: token counts come from the server's usage"},
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="text_chunks",
            min_value=1,
            row_condition=OK,
            meta={"why": "first chunk carries text: a successful request streamed text"},
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="ttft_minus_first_chunk_s",
            min_value=0,
            max_value=0.001,
            row_condition=OK,
            meta={"why": "first chunk carries text: TTFT is the first text chunk's arrival"},
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="requested_output_len",
            column_B="output_tokens",
            or_equal=True,
            row_condition=OK & USAGE,
            ignore_row_if="either_value_is_missing",
            meta={"why": "finish consistent with tokens: never more tokens than max_tokens"},
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="output_tokens",
            column_B="requested_output_len",
            row_condition=OK & USAGE & (Column("finish_reason") == "length"),
            meta={"why": "finish consistent with tokens: finish_reason 'length' means exactly max_tokens"},
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="output_tokens",
            column_B="requested_output_len",
            row_condition=OK & USAGE & NO_EOS,
            meta={"why": "exactly max_tokens tokens when EOS is ignored (no early stop)"},
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="finish_reason",
            value_set=["length"],
            row_condition=OK & NO_EOS,
            meta={"why": "finish_reason 'length' when EOS is ignored (no early stop)"},
        ),
    ]
    if first_chunk_flag:
        exps.append(
            gxe.ExpectColumnValuesToBeInSet(
                column="first_chunk_has_text",
                value_set=[True],
                row_condition=OK,
                meta={"why": "the first streamed chunk carries text"},
            )
        )
    return make_suite(f"{target.slug}.compliance", exps)
