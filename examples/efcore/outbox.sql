-- The outbox table EF Core (Npgsql provider, default conventions) creates
-- for the OutboxMessage entity of the usual EF Core + Service Bus outbox
-- write-up, as `dotnet ef migrations script` prints it. Written by hand
-- from EF Core's conventions (PascalCase names, quoted; Guid -> uuid;
-- string -> text; DateTime -> timestamp with time zone; a nullable
-- DateTime? stays nullable; the key constraint "PK_<table>"):
--
--   public sealed class OutboxMessage
--   {
--       public Guid Id { get; set; }
--       public string Type { get; set; } = string.Empty;
--       public string Payload { get; set; } = string.Empty;   // JSON, as text
--       public DateTime CreatedOnUtc { get; set; }
--       public DateTime? ProcessedOnUtc { get; set; }           // set by the dispatcher
--       public string? Error { get; set; }
--   }
--
-- walpost relays it as it is (cdc.yaml in this folder): no change to the
-- table or to the application.
CREATE TABLE "OutboxMessages" (
    "Id" uuid NOT NULL,
    "Type" text NOT NULL,
    "Payload" text NOT NULL,
    "CreatedOnUtc" timestamp with time zone NOT NULL,
    "ProcessedOnUtc" timestamp with time zone NULL,
    "Error" text NULL,
    CONSTRAINT "PK_OutboxMessages" PRIMARY KEY ("Id")
);
