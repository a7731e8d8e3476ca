// Prints Kafka's broker and topic config catalogue as JSON, read from a Kafka release's own
// config definitions (KafkaConfig.configDef, QuotaConfig.brokerQuotaConfigs, LogConfig,
// GroupConfig, DynamicBrokerConfig, ServerTopicConfigSynonyms). Run by tools/gen_kafka_configs.py with that release's jars on
// the class path (java's single-file source launcher); see that script.

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.coordinator.group.GroupConfig;
import org.apache.kafka.server.config.ConfigSynonym;
import org.apache.kafka.server.config.DynamicBrokerConfig;
import org.apache.kafka.server.config.QuotaConfig;
import org.apache.kafka.server.config.ServerTopicConfigSynonyms;
import org.apache.kafka.storage.internals.log.LogConfig;

public class KafkaConfigCatalogue {
    public static void main(String[] args) throws Exception {
        Map<String, String> modes = DynamicBrokerConfig.dynamicConfigUpdateModes();
        Map<String, Object> broker = new TreeMap<>();
        List<ConfigDef.ConfigKey> keys = new ArrayList<>(
            kafka.server.KafkaConfig.configDef().configKeys().values());
        // the dynamic-only broker configs (replication throttles), outside KafkaConfig
        keys.addAll(QuotaConfig.brokerQuotaConfigs().configKeys().values());
        for (ConfigDef.ConfigKey key : keys) {
            Map<String, Object> entry = describe(key);
            entry.put("update_mode", modes.getOrDefault(key.name, "read-only"));
            broker.putIfAbsent(key.name, entry);
        }
        for (String name : modes.keySet()) {
            if (!broker.containsKey(name)) System.err.println("dynamic but undefined: " + name);
        }
        Map<String, Object> topic = new TreeMap<>();
        for (ConfigDef.ConfigKey key : LogConfig.configKeys().values()) {
            Map<String, Object> entry = describe(key);
            List<String> synonyms = new ArrayList<>();
            List<ConfigSynonym> found = ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS.get(key.name);
            if (found != null) {
                for (ConfigSynonym s : found) synonyms.add(s.name());
            }
            entry.put("broker_synonyms", synonyms);
            topic.put(key.name, entry);
        }
        Map<String, Object> group = new TreeMap<>();
        for (ConfigDef.ConfigKey key : GroupConfig.CONFIG_DEF.configKeys().values()) {
            group.put(key.name, describe(key));
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("kafka_release", AppInfoParser.getVersion());
        out.put("broker", broker);
        out.put("topic", topic);
        out.put("group", group);
        System.out.println(new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT)
            .writeValueAsString(out));
    }

    private static Map<String, Object> describe(ConfigDef.ConfigKey key) {
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("type", key.type.name().toLowerCase(Locale.ROOT));
        entry.put("has_default", key.hasDefault());
        entry.put("default", key.hasDefault() && key.defaultValue != null
            ? ConfigDef.convertToString(key.defaultValue, key.type) : null);
        entry.put("valid_values", key.validator != null ? key.validator.toString() : null);
        entry.put("importance", key.importance != null
            ? key.importance.name().toLowerCase(Locale.ROOT) : null);
        entry.put("internal", key.internalConfig);
        entry.put("doc", key.documentation);
        return entry;
    }
}
