CREATE TABLE IF NOT EXISTS public.outbox (
    id         uuid        PRIMARY KEY,
    type       text        NOT NULL,
    key        text        NULL,
    payload    jsonb       NOT NULL,
    headers    jsonb       NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    seq        bigint      GENERATED ALWAYS AS IDENTITY
);
