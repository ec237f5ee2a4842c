"""The pipelined bench run: every row flows through its components as their inputs exist (an async endpoint).
"""

from __future__ import annotations

from collections.abc import Callable

from mmaudit.rag.evaluate import routers, schemas
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.decisions import Replies, failure, route_row
from mmaudit.rag.evaluate.requests import Requests, RowRequests, clean_evidence, judge_request


def pipelined(chat, judge, rows, views, build: Callable[[int], RowRequests], cfg: BenchConfig,
              progress: Callable[[str, int, int], None]) -> Replies:
    """Every row flows through branches and gates (at once), then both resolvers, its routers and the judge
    as soon as its inputs exist, all under each endpoint's one concurrency limit; identical requests are
    sent once (joined in flight or read from the cache). Same requests, so the same replies as ``staged``.
    A row's requests are built as it starts, in a worker thread (image encoding overlaps the requests in
    flight), and at most ``cfg.rows_in_flight`` rows are under way (each holds its image as a data URL)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    budget = cfg.budgets
    clean = {(r.dataset, str(r.qid)): clean_evidence(r, cfg) for r in rows if r.regime == "TC_IC"}

    async def main() -> Replies:
        await chat.open_session()
        if judge is not chat:
            await judge.open_session()
        text_trust: dict[str, asyncio.Future] = {}
        verdicts: dict[tuple, asyncio.Future] = {}
        window = asyncio.Semaphore(cfg.rows_in_flight)
        builder = ThreadPoolExecutor(1, thread_name_prefix="bench-requests")  # one: OCR and caches stay serial
        done = 0

        def ask(messages, component, salt="", schema=None):
            return chat.achat(messages, budget.get(component), salt, schema)

        async def row(i: int):
            nonlocal done
            async with window:
                x = await asyncio.get_running_loop().run_in_executor(builder, build, i)
                if x.text_trust_key not in text_trust:
                    text_trust[x.text_trust_key] = asyncio.ensure_future(
                        ask(x.text_trust, "gate", schema=schemas.TEXT_TRUST))
                p, t, m, check, tri, tt = await asyncio.gather(
                    ask(x.parametric, "answer", x.parametric_salt), ask(x.text_only, "answer"),
                    ask(x.full_mm, "answer"), ask(x.self_check, "gate", schema=schemas.SELF_CHECK),
                    ask(x.triage, "gate", schema=schemas.TRIAGE), text_trust[x.text_trust_key])
                c = routers.Candidates(p, t, m)
                sel_raw, com_raw = await asyncio.gather(
                    *(ask(Requests.resolver(views[i], c, compose), "resolver", schema=schemas.resolver(compose))
                      for compose in (False, True)))
                sel, com = routers.resolve(c, sel_raw, False), routers.resolve(c, com_raw, True)
                routed = route_row(c, check, tri, tt, sel, com)
                r = rows[i]
                mine = {(r.dataset, str(r.qid), r.question, d.answer) for d, used in routed.values()
                        if failure(*used) is None}
                for pair in mine:
                    if pair not in verdicts:
                        verdicts[pair] = asyncio.ensure_future(
                            judge.achat(judge_request(pair, clean), budget.get("judge"), "", schemas.JUDGE))
                await asyncio.gather(*(verdicts[p] for p in mine))
            done += 1
            progress("bench run: rows", done, len(rows))
            return c, check, tri, tt, sel, com, routed

        progress("bench run: rows", 0, len(rows))  # the stage shows (and its log heartbeat runs) from the start
        try:
            out = await asyncio.gather(*(row(i) for i in range(len(rows))))
        finally:
            builder.shutdown(wait=True)
            await chat.close_session()
            if judge is not chat:
                await judge.close_session()
        cols = list(zip(*out)) if out else [[]] * 7
        return Replies(*(list(x) for x in cols), verdict_raw={p: f.result() for p, f in verdicts.items()})

    return asyncio.run(main())
