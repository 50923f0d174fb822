CREATE TABLE IF NOT EXISTS public.inbox (
    id           text        PRIMARY KEY,
    processed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS inbox_processed_at_idx ON public.inbox (processed_at);
