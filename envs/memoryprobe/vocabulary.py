"""Word banks and sentence templates of the MemoryProbe conversation.

The conversation is a software team lead chatting with an assistant over many sessions. Facts
come in four categories, each with its own key shape and value domain; every service and
project has a near-identical twin used for confusable pairs. Filler is ordinary team chat,
with numbers, names and a few fact-like phrases that are not facts (distractors).
"""
from __future__ import annotations

# ---------------------------------------------------------------- names with confusable twins
SERVICE_TWINS = {
    "checkout-api": "checkout-app", "billing-worker": "billing-workers", "search-indexer": "search-index",
    "auth-gateway": "auth-gateway-v2", "ledger-db": "ledger-db2", "notification-service": "notifications-service",
    "report-builder": "reports-builder", "inventory-sync": "inventory-async", "session-cache": "sessions-cache",
    "pricing-engine": "pricing-engines", "fraud-scorer": "fraud-score", "order-router": "orders-router",
    "media-transcoder": "media-transcoders", "email-relay": "email-relays", "export-service": "exports-service",
    "metrics-collector": "metric-collector", "image-resizer": "image-resizers", "feature-store": "features-store",
}
PROJECT_TWINS = {
    "Atlas": "Atlantis", "Borealis": "Borealix", "Cobalt": "Cobalt Lite", "Dune": "Dunes", "Ember": "Embers",
    "Falcon": "Falconer", "Granite": "Granita", "Helix": "Helios", "Juniper": "Juniper Two", "Kestrel": "Kestrels",
    "Lumen": "Lumina", "Meridian": "Meridia", "Nimbus": "Nimbus Two", "Orion": "Orionis", "Quartz": "Quartzite",
}

# ---------------------------------------------------------------- fact shapes per category
# (name, value kind, parameters); kinds are rendered by generator.draw_value
CONFIG_PARAMS = [
    ("request timeout", "int_unit", (5, 120, 5, "s", "")),
    ("connection pool size", "int", (10, 400, 10)),
    ("max retries", "int", (1, 9, 1)),
    ("cache TTL", "int_unit", (1, 120, 1, "m", "")),
    ("log level", "choice", ("DEBUG", "INFO", "WARN", "ERROR")),
    ("worker count", "int", (2, 64, 1)),
    ("batch size", "int", (50, 5000, 50)),
    ("rate limit", "int_unit", (50, 5000, 50, " rps", "")),
    ("deploy region", "choice", ("eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-southeast-1",
                                 "ap-northeast-1", "sa-east-1")),
    ("heap size", "int_unit", (1, 32, 1, " GB", "")),
    ("queue depth limit", "int", (100, 10000, 100)),
    ("canary percentage", "int_unit", (5, 100, 5, "%", "")),
]
MEASUREMENT_METRICS = [
    ("p95 latency", "int_unit", (20, 1500, 1, " ms", "")),
    ("p99 latency", "int_unit", (40, 3000, 1, " ms", "")),
    ("error rate", "decimal_unit", (0.1, 9.9, "%")),
    ("peak throughput", "int_unit", (40, 9000, 10, " rps", "")),
    ("memory usage", "int_unit", (128, 8192, 16, " MB", "")),
    ("cold start time", "int_unit", (80, 4000, 10, " ms", "")),
    ("CPU utilisation", "int_unit", (5, 98, 1, "%", "")),
    ("build time", "int_unit", (2, 45, 1, " min", "")),
    ("test coverage", "int_unit", (35, 97, 1, "%", "")),
    ("disk usage", "int_unit", (2, 900, 1, " GB", "")),
]
DECISION_TOPICS = [
    ("message queue", ("Kafka", "RabbitMQ", "NATS", "Amazon SQS", "Redis Streams", "Pulsar")),
    ("primary database", ("PostgreSQL", "MySQL", "DynamoDB", "CockroachDB", "MongoDB")),
    ("frontend framework", ("React", "Svelte", "Vue", "Angular", "SolidJS")),
    ("CI provider", ("GitHub Actions", "Buildkite", "CircleCI", "GitLab CI", "Jenkins")),
    ("release cadence", ("weekly", "biweekly", "monthly", "continuous")),
    ("auth provider", ("Okta", "Auth0", "Keycloak", "Cognito")),
    ("observability vendor", ("Datadog", "Grafana Cloud", "Honeycomb", "New Relic")),
    ("API style", ("REST", "GraphQL", "gRPC")),
    ("hosting platform", ("Kubernetes", "ECS", "Nomad", "Cloud Run")),
    ("feature flag tool", ("LaunchDarkly", "Unleash", "Flagsmith", "GrowthBook")),
]
ENTITY_ROLES = ["tech lead", "on-call owner", "product manager", "security reviewer", "QA contact", "design lead",
                "vendor contact", "release captain", "data steward"]
# accumulators: (quantity, initial range, increment range)
ACCUMULATORS = [
    ("GPU-hours used", (100, 900), (5, 60)),
    ("support tickets closed", (20, 300), (1, 25)),
    ("cloud spend in USD", (2000, 20000), (150, 1800)),
    ("bugs fixed", (10, 120), (1, 12)),
    ("customer interviews done", (3, 40), (1, 5)),
    ("story points delivered", (40, 400), (5, 40)),
    ("incidents logged", (2, 30), (1, 4)),
]

FIRST_NAMES = ["Priya", "Tomasz", "Amara", "Diego", "Mei", "Lars", "Fatima", "Kenji", "Chloe", "Samuel", "Ingrid",
               "Rafael", "Aisha", "Jonas", "Leila", "Marco", "Nadia", "Oliver", "Sofia", "Yusuf", "Hana", "Bruno"]
LAST_NAMES = ["Nair", "Kowalski", "Okafor", "Alvarez", "Chen", "Eriksson", "Haddad", "Watanabe", "Martin", "Osei",
              "Larsen", "Souza", "Rahman", "Weber", "Farahani", "Rossi", "Petrova", "Brooks", "Garcia", "Demir"]

# ---------------------------------------------------------------- how facts are said
# Explicit facts are always the line "[FACT] <key>: <value>" ("+<n>" for an accumulator increment).
EXPLICIT_SET = "[FACT] {key}: {value}"
EXPLICIT_ADD = "[FACT] {key}: +{value}"
EXPLICIT_LEADINS = [
    "Pasting the note from the sync so it's on record.", "Adding this to the log.",
    "From the meeting minutes:", "Copying the line from our tracker:", "For the record:",
    "Writing this down before I forget.",
]
# Implicit facts are one sentence said in passing; every template names the key verbatim.
IMPLICIT_SET = [
    "Heads-up: the {key} is now {value}.",
    "I went ahead and set the {key} to {value} after the review.",
    "Not sure it matters, but the {key} was changed to {value} on {day}.",
    "{person} mentioned in passing that the {key} ended up being {value}, which surprised everyone.",
    "We settled on {value} as the {key} for now.",
    "Quick update from {person}: {key} -> {value}.",
    "Can you remember that the {key} should be {value} from now on?",
    "After a lot of back and forth, {value} it is for the {key}.",
]
# A multi-hop fact states that one key takes another key's value (and keeps following it):
# answering it needs both facts.
EXPLICIT_REF = "[FACT] {key}: same as the {target}"
IMPLICIT_REF = [
    "For the {key}, just use whatever the {target} is.",
    "{person} wants the {key} to match the {target}, so keep them the same.",
    "The {key} is the same as the {target}, by the way.",
]
IMPLICIT_ADD = [
    "Add another {value} to the {key}.",
    "The {key} went up by {value} since last time.",
    "We logged {value} more toward the {key} this week.",
    "Oh, and {person} says the {key} grew by {value} over the last few days.",
]

# ---------------------------------------------------------------- how questions are asked
QUESTIONS = {
    "config": "What is the current {key}?",
    "decision": "What did we decide on for the {key}?",
    "measurement": "What was the latest reported {key}?",
    "entity": "Who is the {key}?",
    "accumulator": "What is the running total of the {key} so far?",
}

# ---------------------------------------------------------------- filler (team chat)
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
TIMES = ["9:30", "10:15", "11:00", "1:45", "2:30", "3:00", "4:15"]
CITIES = ["Lisbon", "Toronto", "Singapore", "Nairobi", "Berlin", "Austin", "Osaka", "Warsaw"]
FOODS = ["pizza", "tacos", "sushi", "dumplings", "falafel wraps", "pho"]
USER_FILLER = [
    "Morning! Back from the offsite and catching up on everything now.",
    "{person} asked whether we can move the {project} demo to {day}.",
    "Can you help me word an update for the {project} channel?",
    "The flaky test in {service} failed again on PR #{pr}, third time this week.",
    "I have a dentist appointment at {time}, so I'll be offline for an hour or so.",
    "Do you remember the name of that tracing library we looked at last month?",
    "We're ordering {food} for the team lunch on {day}, any preference?",
    "{person} is out until {day}, so reviews on {project} might be slow.",
    "The build on main took forever again, I think the cache was cold.",
    "Let's draft the agenda for the {project} retro.",
    "I'm reading the postmortem for ticket OPS-{pr} and it's pretty thorough.",
    "Can you summarize the pros and cons of monorepos in two sentences?",
    "Remind me to follow up with {person} about the {service} dashboards.",
    "Honestly the standup ran {num} minutes today, we need to tighten it.",
    "Our sprint ends on {day}, and we still have {num} tickets in review.",
    "I'm flying to {city} next week for the customer visit.",
    "The staging cluster was down for maybe {num} minutes this morning, nothing serious.",
    "What's a polite way to decline a meeting invite?",
    "{person} shared a nice article about backpressure, I'll send it over.",
    "Could you rewrite this commit message so it's less terse?",
    "Quick sanity check: is it 'canceled' or 'cancelled' in our style guide?",
    "The coffee machine on the third floor is broken again.",
    "I need to prepare slides for the {project} quarterly review.",
    "We had {num} people at the brown-bag session, which is a record.",
    "I think {person} is going to propose a new on-call rotation format.",
    "FYI the standup is now at {time} on Mondays.",
    "I set the meeting reminder to {num} minutes before, hopefully that helps.",
    "The retro is now in room {num} because of the renovation.",
    "{person} and I paired on the {service} migration for most of the afternoon.",
    "Is there a good rule of thumb for how many reviewers a PR needs?",
    "I keep forgetting which wiki page has the {project} onboarding checklist.",
    "Security training is due by {day}, just a reminder for myself.",
    "The intern cohort starts in {num} days and I still need to plan their first week.",
    "Can you explain the difference between a mutex and a semaphore like I'm new to this?",
    "It's raining in {city} again, so the customer call moved online.",
]
ASSISTANT_FILLER = [
    "Sure, here's a shorter version: keep the first paragraph and drop the list.",
    "That sounds reasonable; I'd mention the risk explicitly in the update.",
    "Monorepos simplify refactoring across services but make CI harder to scale.",
    "I can draft that. Do you want it formal or casual?",
    "Noted, I'll keep that in mind.",
    "Here's an agenda: what went well, what didn't, and one action item per person.",
    "If the cache was cold, the first build after a dependency bump is usually the slow one.",
    "A polite option: thanks for the invite, I can't make it, but please share the notes.",
    "That's a common cause of flakiness; fixing the race is better than adding retries.",
    "Have a good trip to {city}!",
    "Understood. I'll wait for {person}'s review before suggesting next steps.",
    "Let me know if you want me to turn that into a checklist.",
    "Your style guide uses 'canceled', with one l.",
    "It might help to timebox each update to one minute.",
    "I'd open the slides with the three numbers leadership asked about.",
    "A mutex lets one holder in at a time; a semaphore lets up to N in.",
    "Two reviewers is a common default, one of them from the owning team.",
    "Good idea; a short written summary after the call saves a lot of follow-up questions.",
    "Happy to help with the onboarding plan whenever you're ready.",
    "That makes sense given the deadline.",
    "I'd ask {person} directly; they'll know the history better than the docs do.",
    "Got it.",
]
