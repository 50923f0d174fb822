-- The outbox table Debezium's outbox event router (the EventRouter SMT,
-- io.debezium.transforms.outbox.EventRouter) expects with its default
-- settings. Written by hand from the "Basic outbox table" of Debezium's
-- documentation (documentation/modules/ROOT/pages/transformations/
-- outbox-event-router.adoc in github.com/debezium/debezium):
--
--   Column        |          Type          | Modifiers
--   --------------+------------------------+-----------
--   id            | uuid                   | not null
--   aggregatetype | character varying(255) | not null
--   aggregateid   | character varying(255) | not null
--   type          | character varying(255) | not null
--   payload       | jsonb                  |
--
-- and what the router does with each column by default: id -> header `id`,
-- aggregatetype -> topic `outbox.event.<aggregatetype>` (route.by.field,
-- route.topic.replacement), aggregateid -> record key
-- (table.field.event.key), payload -> record value
-- (table.field.event.payload); `type` is not in the record unless
-- table.fields.additional.placement puts it there (e.g.
-- `type:header:eventType`, as Debezium's outbox example does).
--
-- The table name is that of Debezium's outbox example (outboxevent). The
-- primary key is the application's; Debezium's documentation lists only
-- `not null`. Some setups add a `timestamp` column for
-- table.field.event.timestamp; walpost needs none (see README.md).
--
-- walpost relays it as it is (cdc.yaml in this folder): no change to the
-- table or to the application, including applications that delete each
-- row in the transaction that inserted it (Debezium's "remove after
-- insert").
CREATE TABLE outboxevent (
    id            uuid                   NOT NULL,
    aggregatetype character varying(255) NOT NULL,
    aggregateid   character varying(255) NOT NULL,
    type          character varying(255) NOT NULL,
    payload       jsonb,
    CONSTRAINT outboxevent_pkey PRIMARY KEY (id)
);
