package klog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * Kafka's Java AdminClient: topics, partitions, configs (incremental), the cluster, offsets
 * and record deletion, consumer groups, ACLs and SCRAM users, quotas, leader election and
 * partition reassignment. Each scenario answers what the admin reported; the pytest side
 * judges it against what the broker must hold.
 */
final class AdminScenarios {
    private static final long WAIT = 30;

    private AdminScenarios() {}

    static void register(Map<String, Driver.Scenario> scenarios) {
        scenarios.put("admin_topics", AdminScenarios::topics);
        scenarios.put("admin_configs", AdminScenarios::configs);
        scenarios.put("admin_cluster_and_offsets", AdminScenarios::clusterAndOffsets);
        scenarios.put("admin_groups", AdminScenarios::groups);
        scenarios.put("admin_scram_and_acls", AdminScenarios::scramAndAcls);
        scenarios.put("admin_quotas", AdminScenarios::quotas);
        scenarios.put("admin_describe_topic", AdminScenarios::describeTopic);
        scenarios.put("admin_elect_leaders", AdminScenarios::electLeaders);
        scenarios.put("admin_reassign", AdminScenarios::reassign);
        scenarios.put("admin_by_topic_id_log_dirs_producers", AdminScenarios::byIdLogDirsProducers);
    }

    static Admin admin(JsonNode args) {
        Properties props = Args.client(args);
        props.putIfAbsent("request.timeout.ms", "15000");
        props.putIfAbsent("default.api.timeout.ms", "30000");
        return Admin.create(props);
    }

    static Map<String, Object> describe(TopicDescription d) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("name", d.name());
        out.put("internal", d.isInternal());
        out.put("topic_id", d.topicId().toString());
        List<Map<String, Object>> partitions = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            Map<String, Object> info = new LinkedHashMap<>();
            info.put("partition", p.partition());
            info.put("leader", p.leader() == null ? -1 : p.leader().id());
            info.put("replicas", p.replicas().stream().map(Node::id).toList());
            info.put("isr", p.isr().stream().map(Node::id).toList());
            partitions.add(info);
        }
        out.put("partitions", partitions);
        return out;
    }

    /**
     * createTopics (with configs, validateOnly, a duplicate), listTopics, describeTopics,
     * createPartitions, deleteTopics, for the topics {@code prefix}-a and {@code prefix}-b.
     */
    private static Object topics(JsonNode args, Driver.Channel channel) throws Exception {
        String a = Args.text(args, "prefix") + "-a";
        String b = Args.text(args, "prefix") + "-b";
        String c = Args.text(args, "prefix") + "-c";
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            admin.createTopics(List.of(
                    new NewTopic(a, 3, (short) 1).configs(Map.of("retention.ms", "3600000")),
                    new NewTopic(b, Optional.empty(), Optional.empty())))
                    .all().get(WAIT, TimeUnit.SECONDS);
            admin.createTopics(List.of(new NewTopic(c, 2, (short) 1)),
                    new CreateTopicsOptions().validateOnly(true)).all().get(WAIT, TimeUnit.SECONDS);
            try {
                admin.createTopics(List.of(new NewTopic(a, 1, (short) 1))).all().get();
                out.put("duplicate_create", "accepted");
            } catch (ExecutionException e) {
                out.put("duplicate_create", Args.error(e));
            }
            out.put("listed", new java.util.TreeSet<>(admin.listTopics().names().get()));
            out.put("described", describe(admin.describeTopics(List.of(a)).allTopicNames()
                    .get().get(a)));
            out.put("b_partitions", admin.describeTopics(List.of(b)).allTopicNames().get()
                    .get(b).partitions().size());
            admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5)))
                    .all().get(WAIT, TimeUnit.SECONDS);
            long deadline = System.currentTimeMillis() + 20000;
            int after;
            do {
                after = admin.describeTopics(List.of(a)).allTopicNames().get().get(a)
                        .partitions().size();
            } while (after < 5 && System.currentTimeMillis() < deadline && pause());
            out.put("partitions_after_create_partitions", after);
            try {
                admin.createPartitions(Map.of(a, NewPartitions.increaseTo(2))).all().get();
                out.put("shrink", "accepted");
            } catch (ExecutionException e) {
                out.put("shrink", Args.error(e));
            }
            admin.deleteTopics(List.of(b)).all().get(WAIT, TimeUnit.SECONDS);
            deadline = System.currentTimeMillis() + 20000;
            while (admin.listTopics().names().get().contains(b)
                    && System.currentTimeMillis() < deadline) {
                pause();
            }
            out.put("listed_after_delete", new java.util.TreeSet<>(admin.listTopics().names().get()));
            try {
                admin.describeTopics(List.of(b)).allTopicNames().get();
                out.put("describe_deleted", "found");
            } catch (ExecutionException e) {
                out.put("describe_deleted", Args.error(e));
            }
        }
        return out;
    }

    static boolean pause() {
        try {
            Thread.sleep(100);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return true;
    }

    static Map<String, Object> entry(Config config, String name) {
        ConfigEntry e = config.get(name);
        if (e == null) {
            return null;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("value", e.value());
        out.put("source", e.source().name());
        out.put("read_only", e.isReadOnly());
        out.put("sensitive", e.isSensitive());
        return out;
    }

    private static Config describeOne(Admin admin, ConfigResource resource) throws Exception {
        return admin.describeConfigs(List.of(resource)).all().get(WAIT, TimeUnit.SECONDS)
                .get(resource);
    }

    private static void alter(Admin admin, ConfigResource resource, AlterConfigOp... ops)
            throws Exception {
        admin.incrementalAlterConfigs(Map.of(resource, List.of(ops))).all()
                .get(WAIT, TimeUnit.SECONDS);
    }

    /**
     * describeConfigs and incrementalAlterConfigs (SET, APPEND, SUBTRACT, DELETE) on topic
     * {@code topic}, and on the cluster-wide broker default (SET and DELETE of
     * {@code broker_config}); answers the entries seen after each step.
     */
    private static Object configs(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        String brokerId = args.path("broker_id").asText("0");
        ConfigResource t = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
        ConfigResource defaults = new ConfigResource(ConfigResource.Type.BROKER, "");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)
                    .configs(Map.of("retention.ms", "3600000")))).all().get(WAIT, TimeUnit.SECONDS);
            Config initial = describeOne(admin, t);
            out.put("initial_retention", entry(initial, "retention.ms"));
            out.put("initial_cleanup_policy", entry(initial, "cleanup.policy"));
            out.put("initial_count", initial.entries().size());
            alter(admin, t, new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"),
                    AlterConfigOp.OpType.SET), new AlterConfigOp(
                    new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SET));
            Config set = describeOne(admin, t);
            out.put("set_retention", entry(set, "retention.ms"));
            out.put("set_cleanup_policy", entry(set, "cleanup.policy"));
            alter(admin, t, new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"),
                    AlterConfigOp.OpType.APPEND));
            out.put("appended_cleanup_policy", entry(describeOne(admin, t), "cleanup.policy"));
            alter(admin, t, new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
                    AlterConfigOp.OpType.SUBTRACT));
            out.put("subtracted_cleanup_policy", entry(describeOne(admin, t), "cleanup.policy"));
            alter(admin, t, new AlterConfigOp(new ConfigEntry("retention.ms", ""),
                    AlterConfigOp.OpType.DELETE));
            out.put("deleted_retention", entry(describeOne(admin, t), "retention.ms"));
            try {
                alter(admin, t, new AlterConfigOp(new ConfigEntry("no.such.config", "1"),
                        AlterConfigOp.OpType.SET));
                out.put("unknown_config", "accepted");
            } catch (ExecutionException e) {
                out.put("unknown_config", Args.error(e));
            }
            String name = args.path("broker_config").asText("log.cleaner.backoff.ms");
            String value = args.path("broker_value").asText("20000");
            out.put("broker_before", entry(describeOne(admin, broker), name));
            alter(admin, defaults, new AlterConfigOp(new ConfigEntry(name, value),
                    AlterConfigOp.OpType.SET));
            out.put("defaults_after_set", entry(describeOne(admin, defaults), name));
            long deadline = System.currentTimeMillis() + 10000;
            Map<String, Object> seen;
            do {
                seen = entry(describeOne(admin, broker), name);
            } while (!value.equals(seen.get("value")) && System.currentTimeMillis() < deadline
                    && pause());
            out.put("broker_after_set", seen);
            alter(admin, defaults, new AlterConfigOp(new ConfigEntry(name, ""),
                    AlterConfigOp.OpType.DELETE));
            out.put("broker_after_delete", entry(describeOne(admin, broker), name));
        }
        return out;
    }

    /**
     * describeCluster; listOffsets (earliest, latest, a timestamp, the max timestamp) of
     * {@code topic}-0, which holds records from the pytest side; deleteRecords before
     * {@code delete_before}; listOffsets earliest again.
     */
    private static Object clusterAndOffsets(JsonNode args, Driver.Channel channel) throws Exception {
        TopicPartition tp = new TopicPartition(Args.text(args, "topic"), 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            DescribeClusterResult cluster = admin.describeCluster();
            out.put("cluster_id", cluster.clusterId().get());
            out.put("controller", cluster.controller().get().id());
            List<Map<String, Object>> nodes = new ArrayList<>();
            for (Node n : cluster.nodes().get()) {
                nodes.add(Map.of("id", n.id(), "host", n.host(), "port", n.port()));
            }
            out.put("nodes", nodes);
            Map<String, OffsetSpec> specs = new LinkedHashMap<>();
            specs.put("earliest", OffsetSpec.earliest());
            specs.put("latest", OffsetSpec.latest());
            specs.put("for_timestamp", OffsetSpec.forTimestamp(args.path("timestamp").asLong()));
            specs.put("max_timestamp", OffsetSpec.maxTimestamp());
            for (Map.Entry<String, OffsetSpec> s : specs.entrySet()) {
                ListOffsetsResultInfo info = admin.listOffsets(Map.of(tp, s.getValue()))
                        .partitionResult(tp).get(WAIT, TimeUnit.SECONDS);
                out.put(s.getKey(), List.of(info.offset(), info.timestamp()));
            }
            long lowWatermark = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(
                    args.path("delete_before").asLong()))).lowWatermarks().get(tp)
                    .get(WAIT, TimeUnit.SECONDS).lowWatermark();
            out.put("low_watermark", lowWatermark);
            out.put("earliest_after_delete", admin.listOffsets(Map.of(tp, OffsetSpec.earliest()))
                    .partitionResult(tp).get().offset());
            try {
                admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(1_000_000)))
                        .all().get(WAIT, TimeUnit.SECONDS);
                out.put("delete_beyond_end", "accepted");
            } catch (ExecutionException e) {
                out.put("delete_beyond_end", Args.error(e));
            }
        }
        return out;
    }

    /**
     * Consumer group administration on group {@code group} over {@code topic} (2
     * partitions with records): a member commits; listGroups, describeConsumerGroups,
     * listConsumerGroupOffsets; a static member removed by removeMembersFromConsumerGroup;
     * alterConsumerGroupOffsets, deleteConsumerGroupOffsets, deleteConsumerGroups.
     */
    private static Object groups(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        String group = Args.text(args, "group");
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        Map<String, Object> out = new LinkedHashMap<>();
        Properties props = Args.client(args);
        props.put("group.id", group);
        props.put("group.instance.id", "admin-static");
        props.put("session.timeout.ms", "30000");
        try (Admin admin = admin(args)) {
            try (KafkaConsumer<byte[], byte[]> member = ConsumerScenarios.consumer(props)) {
                member.subscribe(List.of(topic));
                int[] read = {0};
                ConsumerScenarios.pollUntil(member, () -> read[0] >= args.path("expect").asInt(),
                        30000, "the member to read every record", rs -> read[0] += rs.count());
                member.commitSync();
                out.put("listed", listed(admin, group));
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                        .describedGroups().get(group).get(WAIT, TimeUnit.SECONDS);
                out.put("state", d.groupState().toString());
                out.put("assignor", d.partitionAssignor());
                out.put("coordinator", d.coordinator().id());
                out.put("members", ConsumerScenarios.members(admin, group));
                out.put("committed", offsets(admin, group));
                try {
                    admin.deleteConsumerGroups(List.of(group)).all().get(WAIT, TimeUnit.SECONDS);
                    out.put("delete_while_active", "accepted");
                } catch (ExecutionException e) {
                    out.put("delete_while_active", Args.error(e));
                }
                admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(
                        List.of(new MemberToRemove("admin-static")))).all().get(WAIT, TimeUnit.SECONDS);
                out.put("members_after_remove", ConsumerScenarios.members(admin, group));
                out.put("state_after_remove", admin.describeConsumerGroups(List.of(group))
                        .describedGroups().get(group).get().groupState().toString());
            }
            admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(1, "moved")))
                    .all().get(WAIT, TimeUnit.SECONDS);
            out.put("after_alter", offsets(admin, group));
            admin.deleteConsumerGroupOffsets(group, java.util.Set.of(p1)).all()
                    .get(WAIT, TimeUnit.SECONDS);
            out.put("after_delete_offsets", offsets(admin, group));
            admin.deleteConsumerGroups(List.of(group)).all().get(WAIT, TimeUnit.SECONDS);
            out.put("listed_after_delete", listed(admin, group));
            try {
                admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
                out.put("state_after_delete", admin.describeConsumerGroups(List.of(group))
                        .describedGroups().get(group).get().groupState().toString());
            } catch (ExecutionException e) {
                out.put("state_after_delete", Args.error(e));
            }
        }
        return out;
    }

    private static List<String> listed(Admin admin, String group) throws Exception {
        List<String> out = new ArrayList<>();
        for (GroupListing g : admin.listGroups().all().get(WAIT, TimeUnit.SECONDS)) {
            if (g.groupId().equals(group)) {
                out.add(g.groupId() + " " + g.protocol() + " " + g.groupState().map(Object::toString)
                        .orElse("?") + " " + g.type().map(Object::toString).orElse("?"));
            }
        }
        return out;
    }

    private static Map<String, Object> offsets(Admin admin, String group) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(WAIT, TimeUnit.SECONDS);
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : committed.entrySet()) {
            out.put(e.getKey().toString(), e.getValue() == null ? null
                    : List.of(e.getValue().offset(), e.getValue().metadata()));
        }
        return out;
    }

    /**
     * On a broker with SASL and the ACL authorizer, as the super user {@code config}
     * says: SCRAM credentials for {@code user} made and described; ACLs created, described
     * and deleted; {@code user} producing and consuming with {@code user_config} as the
     * ACLs allow and refuse; the credentials deleted.
     */
    private static Object scramAndAcls(JsonNode args, Driver.Channel channel) throws Exception {
        String user = Args.text(args, "user");
        String password = Args.text(args, "password");
        String topic = Args.text(args, "topic");
        String other = topic + "-forbidden";
        String groupPrefix = Args.text(args, "group_prefix");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1),
                    new NewTopic(other, 1, (short) 1))).all().get(WAIT, TimeUnit.SECONDS);
            admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion(user, new ScramCredentialInfo(
                            ScramMechanism.SCRAM_SHA_512, 8192), password),
                    new UserScramCredentialUpsertion(user, new ScramCredentialInfo(
                            ScramMechanism.SCRAM_SHA_256, 4096), password)))
                    .all().get(WAIT, TimeUnit.SECONDS);
            UserScramCredentialsDescription described = admin.describeUserScramCredentials(
                    List.of(user)).description(user).get(WAIT, TimeUnit.SECONDS);
            out.put("credentials", described.credentialInfos().stream()
                    .map(i -> i.mechanism().mechanismName() + ":" + i.iterations()).sorted().toList());
            String principal = "User:" + user;
            AclBinding write = new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic,
                    PatternType.LITERAL), new AccessControlEntry(principal, "*", AclOperation.WRITE,
                    AclPermissionType.ALLOW));
            AclBinding read = new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic,
                    PatternType.LITERAL), new AccessControlEntry(principal, "*", AclOperation.READ,
                    AclPermissionType.ALLOW));
            AclBinding group = new AclBinding(new ResourcePattern(ResourceType.GROUP, groupPrefix,
                    PatternType.PREFIXED), new AccessControlEntry(principal, "*", AclOperation.READ,
                    AclPermissionType.ALLOW));
            admin.createAcls(List.of(write, read, group)).all().get(WAIT, TimeUnit.SECONDS);
            AclBindingFilter mine = new AclBindingFilter(ResourcePatternFilter.ANY,
                    new AccessControlEntryFilter(principal, null, AclOperation.ANY,
                            AclPermissionType.ANY));
            long deadline = System.currentTimeMillis() + 10000;
            Collection<AclBinding> listed;
            do {
                listed = admin.describeAcls(mine).values().get(WAIT, TimeUnit.SECONDS);
            } while (listed.size() < 3 && System.currentTimeMillis() < deadline && pause());
            out.put("acls", listed.stream().map(AclBinding::toString).sorted().toList());
            Properties as = Args.client(args);
            as.clear();
            as.put("bootstrap.servers", args.path("bootstrap").asText());
            Args.merge(as, args.path("user_config"));
            out.put("produce_allowed", produceOne(as, topic));
            out.put("produce_forbidden", produceOne(as, other));
            out.put("consume_allowed", consumeOne(as, topic, groupPrefix + "-1"));
            out.put("consume_forbidden_group", consumeOne(as, topic, "elsewhere"));
            Collection<AclBinding> deleted = admin.deleteAcls(List.of(write.toFilter())).all()
                    .get(WAIT, TimeUnit.SECONDS);
            out.put("deleted", deleted.stream().map(AclBinding::toString).toList());
            deadline = System.currentTimeMillis() + 10000;
            String afterDelete;
            do {
                afterDelete = produceOne(as, topic);
            } while (afterDelete.equals("ok") && System.currentTimeMillis() < deadline && pause());
            out.put("produce_after_acl_deleted", afterDelete);
            admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512),
                    new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)))
                    .all().get(WAIT, TimeUnit.SECONDS);
            try {
                admin.describeUserScramCredentials(List.of(user)).description(user).get();
                out.put("described_after_delete", "found");
            } catch (ExecutionException e) {
                out.put("described_after_delete", Args.error(e));
            }
            out.put("produce_after_user_deleted", produceOne(as, topic));
        }
        return out;
    }

    private static String produceOne(Properties base, String topic) {
        Properties props = (Properties) base.clone();
        props.put("max.block.ms", "10000");
        props.put("delivery.timeout.ms", "10000");
        props.put("request.timeout.ms", "5000");
        props.put("enable.idempotence", "false");
        try (KafkaProducer<byte[], byte[]> producer = ProducerScenarios.producer(props)) {
            producer.send(new org.apache.kafka.clients.producer.ProducerRecord<>(topic,
                    "v".getBytes())).get(20, TimeUnit.SECONDS);
            return "ok";
        } catch (Exception e) {
            return Args.error(e);
        }
    }

    private static String consumeOne(Properties base, String topic, String group) {
        Properties props = (Properties) base.clone();
        props.put("group.id", group);
        props.put("default.api.timeout.ms", "10000");
        try (KafkaConsumer<byte[], byte[]> consumer = ConsumerScenarios.consumer(props)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 15000;
            while (System.currentTimeMillis() < deadline) {
                if (!consumer.poll(Duration.ofMillis(200)).isEmpty()) {
                    consumer.commitSync();
                    return "ok";
                }
            }
            return "nothing";
        } catch (Exception e) {
            return Args.error(e);
        }
    }

    /**
     * alterClientQuotas for a user, a client id, the default user and a user/client-id
     * pair; describeClientQuotas of all; one quota removed; described again.
     */
    private static Object quotas(JsonNode args, Driver.Channel channel) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        ClientQuotaEntity alice = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "alice"));
        ClientQuotaEntity client = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, "c1"));
        Map<String, String> defaultUserMap = new java.util.HashMap<>();
        defaultUserMap.put(ClientQuotaEntity.USER, null);
        ClientQuotaEntity defaultUser = new ClientQuotaEntity(defaultUserMap);
        ClientQuotaEntity pair = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "bob",
                ClientQuotaEntity.CLIENT_ID, "c2"));
        try (Admin admin = admin(args)) {
            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(alice, List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", 1024.0),
                            new ClientQuotaAlteration.Op("consumer_byte_rate", 2048.0))),
                    new ClientQuotaAlteration(client, List.of(
                            new ClientQuotaAlteration.Op("request_percentage", 50.0))),
                    new ClientQuotaAlteration(defaultUser, List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", 4096.0))),
                    new ClientQuotaAlteration(pair, List.of(
                            new ClientQuotaAlteration.Op("consumer_byte_rate", 512.0)))))
                    .all().get(WAIT, TimeUnit.SECONDS);
            out.put("all", quotaMap(admin, ClientQuotaFilter.all()));
            out.put("alice", quotaMap(admin, ClientQuotaFilter.containsOnly(List.of(
                    org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity(
                            ClientQuotaEntity.USER, "alice")))));
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(alice, List.of(
                    new ClientQuotaAlteration.Op("producer_byte_rate", null))))).all()
                    .get(WAIT, TimeUnit.SECONDS);
            out.put("after_remove", quotaMap(admin, ClientQuotaFilter.all()));
            try {
                admin.alterClientQuotas(List.of(new ClientQuotaAlteration(alice, List.of(
                        new ClientQuotaAlteration.Op("no_such_quota", 1.0))))).all().get();
                out.put("unknown_key", "accepted");
            } catch (ExecutionException e) {
                out.put("unknown_key", Args.error(e));
            }
        }
        return out;
    }

    private static Map<String, Object> quotaMap(Admin admin, ClientQuotaFilter filter)
            throws Exception {
        Map<String, Object> out = new TreeMap<>();
        admin.describeClientQuotas(filter).entities().get(WAIT, TimeUnit.SECONDS).forEach(
                (entity, values) -> out.put(new TreeMap<>(entity.entries()).toString(),
                        new TreeMap<>(values)));
        return out;
    }

    /** describeTopics of {@code topic}, as the other scenarios give it. */
    private static Object describeTopic(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        try (Admin admin = admin(args)) {
            return describe(admin.describeTopics(List.of(topic)).allTopicNames()
                    .get(WAIT, TimeUnit.SECONDS).get(topic));
        }
    }

    /**
     * electLeaders (PREFERRED, or UNCLEAN with {@code unclean}) for {@code partitions} of
     * {@code topic}; answers each partition's result (null: elected; else the error) and
     * the leaders describeTopics reports afterwards.
     */
    private static Object electLeaders(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        java.util.Set<TopicPartition> tps = new java.util.HashSet<>(
                ConsumerScenarios.partitions(args));
        ElectionType type = args.path("unclean").asBoolean() ? ElectionType.UNCLEAN
                : ElectionType.PREFERRED;
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            Map<TopicPartition, Optional<Throwable>> results = admin.electLeaders(type, tps)
                    .partitions().get(WAIT, TimeUnit.SECONDS);
            Map<String, Object> byPartition = new TreeMap<>();
            results.forEach((tp, error) -> byPartition.put(Integer.toString(tp.partition()),
                    error.map(e -> e.getClass().getSimpleName()).orElse(null)));
            out.put("results", byPartition);
            try {
                admin.electLeaders(type, tps).all().get(WAIT, TimeUnit.SECONDS);
                out.put("again", "elected");
            } catch (ExecutionException e) {
                out.put("again", Args.error(e));
            }
            out.put("described", describe(admin.describeTopics(List.of(topic)).allTopicNames()
                    .get().get(topic)));
        }
        return out;
    }

    /**
     * alterPartitionReassignments of {@code topic}'s partitions to {@code targets} (a
     * list of replica lists, one per partition), listPartitionReassignments until none is
     * left, describeTopics; then a cancellation of a reassignment that is not running.
     */
    private static Object reassign(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        Map<TopicPartition, Optional<NewPartitionReassignment>> moves = new LinkedHashMap<>();
        int p = 0;
        for (JsonNode target : args.path("targets")) {
            List<Integer> replicas = new ArrayList<>();
            target.forEach(n -> replicas.add(n.asInt()));
            moves.put(new TopicPartition(topic, p++),
                    Optional.of(new NewPartitionReassignment(replicas)));
        }
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            admin.alterPartitionReassignments(moves).all().get(WAIT, TimeUnit.SECONDS);
            List<Object> seen = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 45000;
            while (true) {
                Map<TopicPartition, PartitionReassignment> running =
                        admin.listPartitionReassignments(moves.keySet()).reassignments()
                                .get(WAIT, TimeUnit.SECONDS);
                running.forEach((tp, r) -> seen.add(List.of(tp.partition(), r.replicas(),
                        r.addingReplicas(), r.removingReplicas())));
                if (running.isEmpty()) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("reassignment still running: " + running);
                }
                Thread.sleep(200);
            }
            out.put("in_progress_seen", seen.size());
            out.put("described", describe(admin.describeTopics(List.of(topic)).allTopicNames()
                    .get().get(topic)));
            Map<TopicPartition, Optional<NewPartitionReassignment>> cancel = new LinkedHashMap<>();
            cancel.put(new TopicPartition(topic, 0), Optional.empty());
            try {
                admin.alterPartitionReassignments(cancel).all().get(WAIT, TimeUnit.SECONDS);
                out.put("cancel_idle", "accepted");
            } catch (ExecutionException e) {
                out.put("cancel_idle", Args.error(e));
            }
        }
        return out;
    }

    /** What a call gave: its value, or its exception's simple name. */
    @FunctionalInterface
    interface Call {
        Object get() throws Exception;
    }

    static Object attempt(Call call) {
        try {
            return call.get();
        } catch (Exception e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null
                    ? e.getCause() : e;
            System.err.println("[admin] call failed: " + cause);
            cause.printStackTrace();
            return "error: " + Args.error(e);
        }
    }

    /**
     * describeTopics and deleteTopics by topic id, describeLogDirs and
     * describeReplicaLogDirs, describeProducers of a partition an idempotent producer
     * wrote, listConsumerGroupOffsets of two groups in one call, describeFeatures, and
     * fenceProducers of a transactional id whose producer then finds itself fenced.
     */
    private static Object byIdLogDirsProducers(JsonNode args, Driver.Channel channel)
            throws Exception {
        String topic = Args.text(args, "topic");
        int brokerId = args.path("broker_id").asInt(0);
        TopicPartition tp = new TopicPartition(topic, 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all()
                    .get(WAIT, TimeUnit.SECONDS);
            Properties producerProps = Args.client(args);
            producerProps.put("enable.idempotence", "true");
            long producerId;
            try (KafkaProducer<byte[], byte[]> producer = ProducerScenarios.producer(producerProps)) {
                for (int i = 0; i < 5; i++) {
                    producer.send(new org.apache.kafka.clients.producer.ProducerRecord<>(
                            topic, 0, null, ("v" + i).getBytes())).get(20, TimeUnit.SECONDS);
                }
            }
            org.apache.kafka.common.Uuid id = admin.describeTopics(List.of(topic))
                    .allTopicNames().get().get(topic).topicId();
            out.put("by_id", attempt(() -> admin.describeTopics(
                    org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(id)))
                    .allTopicIds().get(WAIT, TimeUnit.SECONDS).get(id).name()));
            out.put("log_dirs", attempt(() -> {
                Map<String, Object> dirs = new TreeMap<>();
                admin.describeLogDirs(List.of(brokerId)).allDescriptions().get(WAIT, TimeUnit.SECONDS)
                        .get(brokerId).forEach((dir, d) -> dirs.put(dir, Map.of(
                                "error", String.valueOf(d.error()),
                                "partition_0_size", d.replicaInfos().containsKey(tp)
                                        ? d.replicaInfos().get(tp).size() : -1)));
                return dirs;
            }));
            out.put("replica_log_dir", attempt(() -> admin.describeReplicaLogDirs(List.of(
                    new org.apache.kafka.common.TopicPartitionReplica(topic, 0, brokerId)))
                    .all().get(WAIT, TimeUnit.SECONDS).values().iterator().next()
                    .getCurrentReplicaLogDir()));
            out.put("producers", attempt(() -> admin.describeProducers(List.of(tp))
                    .partitionResult(tp).get(WAIT, TimeUnit.SECONDS).activeProducers().stream()
                    .map(p -> List.of(p.producerId(), p.producerEpoch(), p.lastSequence()))
                    .toList()));
            for (String g : List.of("ga-" + topic, "gb-" + topic)) {
                admin.alterConsumerGroupOffsets(g, Map.of(tp, new OffsetAndMetadata(
                        g.startsWith("ga") ? 1 : 2))).all().get(WAIT, TimeUnit.SECONDS);
            }
            out.put("two_groups", attempt(() -> {
                Map<String, org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec> specs =
                        new LinkedHashMap<>();
                specs.put("ga-" + topic, new org.apache.kafka.clients.admin
                        .ListConsumerGroupOffsetsSpec());
                specs.put("gb-" + topic, new org.apache.kafka.clients.admin
                        .ListConsumerGroupOffsetsSpec());
                Map<String, Object> byGroup = new TreeMap<>();
                admin.listConsumerGroupOffsets(specs).all().get(WAIT, TimeUnit.SECONDS)
                        .forEach((g, o) -> byGroup.put(g, o.get(tp).offset()));
                return byGroup;
            }));
            out.put("features", attempt(() -> {
                var f = admin.describeFeatures().featureMetadata().get(WAIT, TimeUnit.SECONDS);
                return Map.of("finalized", f.finalizedFeatures().keySet().toString(),
                        "supported", f.supportedFeatures().keySet().toString());
            }));
            String txnId = "fence-" + topic;
            KafkaProducer<byte[], byte[]> transactional = TransactionScenarios.transactional(args, txnId);
            try {
                transactional.initTransactions();
                out.put("fence", attempt(() -> {
                    admin.fenceProducers(List.of(txnId)).all().get(WAIT, TimeUnit.SECONDS);
                    return "fenced";
                }));
                out.put("fenced_producer", attempt(() -> {
                    transactional.beginTransaction();
                    transactional.send(new org.apache.kafka.clients.producer.ProducerRecord<>(
                            topic, 1, null, "x".getBytes())).get(20, TimeUnit.SECONDS);
                    transactional.commitTransaction();
                    return "committed";
                }));
            } finally {
                transactional.close(Duration.ofSeconds(5));
            }
            out.put("delete_by_id", attempt(() -> {
                admin.deleteTopics(org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(id)))
                        .all().get(WAIT, TimeUnit.SECONDS);
                return "deleted";
            }));
            long deadline = System.currentTimeMillis() + 20000;
            while (admin.listTopics().names().get().contains(topic)
                    && System.currentTimeMillis() < deadline) {
                pause();
            }
            out.put("listed_after_delete", admin.listTopics().names().get().contains(topic));
        }
        return out;
    }
}
